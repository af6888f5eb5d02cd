package kit

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
)

// TestTransactionsRequeuesDoNotGrowTheStagedList: a record staged and
// discarded again and again (requeued each time) behind records staged
// and waiting for it leaves a few dropped entries at most, and what
// waits still commits in staging order.
func TestTransactionsRequeuesDoNotGrowTheStagedList(t *testing.T) {
	var published []string
	tx := NewTransactions(PartitionsOptions[string]{Interval: time.Hour, Threshold: 1 << 30, Retry: time.Millisecond},
		func(_ []Position[string], msgs []string) error { published = append(published, msgs...); return nil }, nil)
	t.Cleanup(tx.Close)
	p := tx.Claim("t/0", 0, 0)
	for off := range int64(3) {
		tx.Add(p, off, driver.Record{}, false)
	}
	rs := tx.Take(nil, 3)
	for i, m := range []string{"b", "c"} {
		if err := tx.Stage(rs[i+1].Handle, []string{m}); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		if err := tx.Stage(rs[0].Handle, []string{"again"}); err != nil {
			t.Fatal(err)
		}
		tx.Discard([]any{rs[0].Handle})
	}
	tx.mu.Lock()
	n := len(tx.staged)
	tx.mu.Unlock()
	if n > 5 {
		t.Fatalf("%d staged entries for 2 records staged, want a few at most", n)
	}
	if err := tx.Stage(rs[0].Handle, []string{"last"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack([]any{rs[0].Handle, rs[1].Handle, rs[2].Handle}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(published, []string{"b", "c", "last"}) {
		t.Fatalf("published %v, want b c last", published)
	}
}
