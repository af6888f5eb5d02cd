package kit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestEnsuredDeclaresOncePerKey: a key is declared on its first use, not
// again while fresh, again after Forget or a failed declaration, and
// again once older than Refresh.
func TestEnsuredDeclaresOncePerKey(t *testing.T) {
	var e kit.Ensured[string]
	calls := 0
	declare := func() error { calls++; return nil }
	for range 3 {
		if err := e.Ensure("q", declare); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("%d declarations of one key, want 1", calls)
	}
	e.Forget("q")
	_ = e.Ensure("q", declare)
	broken := errors.New("refused")
	if err := e.Ensure("r", func() error { return broken }); !errors.Is(err, broken) {
		t.Fatalf("failed declaration: %v", err)
	}
	_ = e.Ensure("r", declare)
	if calls != 3 {
		t.Fatalf("%d declarations after Forget and a failure, want 3", calls)
	}
	clock := time.Unix(0, 0)
	timed := kit.Ensured[string]{Refresh: time.Minute, Now: func() time.Time { return clock }}
	_ = timed.Ensure("q", declare)
	clock = clock.Add(time.Minute)
	_ = timed.Ensure("q", declare) // a minute old: still fresh
	clock = clock.Add(time.Second)
	_ = timed.Ensure("q", declare)
	if calls != 5 {
		t.Fatalf("%d declarations with a stale one, want 5", calls)
	}
}
