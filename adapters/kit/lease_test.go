package kit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// store is one lease key of a broker: set when free or the token's own.
type store struct {
	mu    sync.Mutex
	owner string
	fail  error
}

func (s *store) lease(token string) *kit.Lease {
	take := func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fail != nil {
			return false, s.fail
		}
		if s.owner == "" {
			s.owner = token
		}
		return s.owner == token, nil
	}
	drop := func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.owner == token {
			s.owner = ""
		}
		return nil
	}
	return kit.NewLease(3*time.Second, take, drop, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestLeaseOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	s := &store{}
	a, b := s.lease("a"), s.lease("b")
	if ok, err := a.Try(ctx); !ok || err != nil || !a.Held() {
		t.Fatalf("a.Try on a free lease = %v, %v", ok, err)
	}
	if ok, err := b.Try(ctx); ok || err != nil || b.Held() {
		t.Fatalf("b.Try on a's lease = %v, %v, want false, nil", ok, err)
	}
	if a.Keep(ctx) != time.Second || b.Keep(ctx) != 750*time.Millisecond {
		t.Fatal("Keep: want a third of the TTL while held, a quarter while not")
	}
	waited := make(chan bool)
	go func() { waited <- b.Wait(ctx) }()
	a.Release()
	if a.Held() {
		t.Fatal("a holds the lease after Release")
	}
	if ok, _ := b.Try(ctx); !ok {
		t.Fatal("b could not take the released lease")
	}
	if !<-waited {
		t.Fatal("b.Wait returned false once b held the lease")
	}
	s.mu.Lock()
	s.fail = errors.New("broker unreachable")
	s.mu.Unlock()
	if ok, err := b.Try(ctx); ok || err == nil || b.Held() {
		t.Fatalf("a failed renewal = %v, %v: the lease is lost", ok, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if b.Wait(cctx) {
		t.Fatal("Wait on a lease not held returned true after ctx ended")
	}
	var none *kit.Lease
	none.Release()
}

func TestLeaseOnLostReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	s := &store{}
	a := s.lease("a")
	var got []error
	a.OnLost(func(err error) { got = append(got, err) })
	if ok, _ := a.Try(ctx); !ok {
		t.Fatal("a could not take a free lease")
	}
	s.mu.Lock()
	s.owner = "b" // taken over after a's TTL
	s.mu.Unlock()
	if ok, _ := a.Try(ctx); ok {
		t.Fatal("a renewed a lease b holds")
	}
	if ok, _ := a.Try(ctx); ok {
		t.Fatal("a took a lease b holds")
	}
	if len(got) != 1 {
		t.Fatalf("OnLost got %d reports (%v), want exactly one: the loss, not every failed try after it", len(got), got)
	}
}

// A renewal cut short by its context (the holder is closing: its timer's
// context ends while the renewal is at the broker) may have renewed the
// lease there: it must not count as a loss, and Release must still give
// the lease up, or the next holder waits out the TTL.
func TestLeaseReleasedAfterAnInterruptedRenewal(t *testing.T) {
	var s store
	a := s.lease("a")
	if ok, err := a.Try(context.Background()); !ok || err != nil {
		t.Fatalf("Try = %v, %v; want the free lease", ok, err)
	}
	lost := make(chan error, 1)
	a.OnLost(func(err error) { lost <- err })
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.fail = context.Canceled // the renewal is applied, its answer lost
	s.mu.Unlock()
	cancel()
	if ok, _ := a.Try(ctx); ok {
		t.Fatal("an interrupted renewal reported the lease held")
	}
	select {
	case err := <-lost:
		t.Fatalf("an interrupted renewal reported the lease lost: %v", err)
	default:
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	a.Release()
	if ok, err := s.lease("b").Try(context.Background()); !ok || err != nil {
		t.Fatalf("after Release another holder's Try = %v, %v; want the lease (it was not given up)", ok, err)
	}
}
