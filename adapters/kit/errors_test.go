package kit_test

import (
	"errors"
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

func TestErrorsReportConcurrentWithClose(t *testing.T) {
	e := kit.NewErrors(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			e.Report(errors.New("x"))
		}
	}()
	e.Close()
	<-done
	for range e.C() {
	}
}
