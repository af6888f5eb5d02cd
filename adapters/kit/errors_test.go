package kit_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestErrorsDropsAndCountsWhenFull(t *testing.T) {
	e := kit.NewErrors(2)
	for i := range 5 {
		ok := e.Report(errors.New("x"))
		if want := i < 2; ok != want {
			t.Fatalf("Report #%d = %v, want %v", i, ok, want)
		}
	}
	if got := e.Dropped(); got != 3 {
		t.Fatalf("Dropped = %d, want 3", got)
	}
	if !e.Report(nil) || e.Dropped() != 3 {
		t.Fatal("Report(nil) must be ignored")
	}
	e.Close()
	e.Close() // idempotent
	if e.Report(errors.New("late")) {
		t.Fatal("Report after Close must drop")
	}
	if got := e.Dropped(); got != 4 {
		t.Fatalf("Dropped after Close = %d, want 4", got)
	}
	n := 0
	for range e.C() {
		n++
	}
	if n != 2 {
		t.Fatalf("read %d buffered errors after Close, want 2", n)
	}
}

// Report racing Close neither panics (a send on a closed channel) nor
// loses count: every report is either readable after Close or dropped.
func TestErrorsReportConcurrentWithClose(t *testing.T) {
	const reports = 1000
	e := kit.NewErrors(1)
	done := make(chan struct{})
	var kept atomic.Int64
	go func() {
		defer close(done)
		for range reports {
			if e.Report(errors.New("x")) {
				kept.Add(1)
			}
		}
	}()
	e.Close()
	<-done
	read := 0
	for range e.C() {
		read++
	}
	if int64(read) != kept.Load() {
		t.Fatalf("read %d errors after Close, but Report accepted %d", read, kept.Load())
	}
	if got := int64(e.Dropped()) + kept.Load(); got != reports {
		t.Fatalf("accepted %d + dropped %d = %d, want every one of %d reports accounted for", kept.Load(), e.Dropped(), got, reports)
	}
}
