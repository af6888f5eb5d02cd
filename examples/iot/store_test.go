package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Readings without identity (ID "": a device publishing without an id to
// a broker that assigns none) are all stored; readings with the same id
// are stored once. With msg_id as the primary key, every reading after
// the first one without identity was dropped as a "duplicate".
func TestStoreKeepsEveryReadingWithoutIdentity(t *testing.T) {
	ctx := context.Background()
	st, err := openStore(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := Point{Device: "d-1", Point: "temp", Value: 21.5, Unit: "C", At: at}
	n, err := st.write(ctx, []string{"", "", "id-1", "id-1", ""}, []Point{p, p, p, p, p})
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("stored %d readings, want 4: three without identity and one of the two with id-1", n)
	}
	if n, err := st.write(ctx, []string{"", "id-1"}, []Point{p, p}); err != nil || n != 1 {
		t.Fatalf("second batch stored %d (%v), want 1: the one without identity", n, err)
	}
}
