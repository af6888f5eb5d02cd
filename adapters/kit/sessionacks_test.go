package kit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

type ackRec struct {
	s    *kit.AckSession[*ackRec, string]
	gen  uint32
	id   int
	live bool
}

func ackSessionOf(r *ackRec) (*kit.AckSession[*ackRec, string], bool) {
	return r.s, r.live && r.gen == r.s.Gen()
}

func ids(hs []*ackRec) []int {
	var out []int
	for _, h := range hs {
		out = append(out, h.id)
	}
	return out
}

// TestGroupAcks: handles group by session in the order of their first
// one; a handle not live, or of an earlier generation, is lost; queued
// batches wait on their session until a request takes them.
func TestGroupAcks(t *testing.T) {
	var s1, s2 kit.AckSession[*ackRec, string]
	s2.Reset()
	hs := []*ackRec{{&s2, 1, 1, true}, {&s1, 0, 2, true}, {&s2, 1, 3, true}, {&s1, 0, 4, false}, {&s2, 0, 5, true}}
	bs, lost := kit.GroupAcks(hs, "accept", true, true, ackSessionOf)
	if lost != 2 || len(bs) != 2 || bs[0].Session() != &s2 || !slices.Equal(ids(bs[0].Handles), []int{1, 3}) ||
		bs[1].Session() != &s1 || !slices.Equal(ids(bs[1].Handles), []int{2}) || bs[0].Kind != "accept" || !bs[0].Deferred {
		t.Fatalf("GroupAcks = %v lost %d; want s2 [1 3], s1 [2], 2 lost", bs, lost)
	}
	if p := s2.Take(false); len(p) != 1 || p[0] != bs[0] {
		t.Fatalf("pending on s2 = %v, want its batch, left pending", p)
	}
	if p := s2.Take(true); len(p) != 1 || p[0] != bs[0] {
		t.Fatalf("taken on s2 = %v, want its batch", p)
	}
	if p := s2.Take(true); len(p) != 0 {
		t.Fatalf("pending on s2 after Take = %v, want none", p)
	}
	if bs, _ := kit.GroupAcks(hs[:1], "renew", false, false, ackSessionOf); len(bs) != 1 || len(s2.Take(true)) != 0 {
		t.Fatalf("GroupAcks without queue queued on s2 (batches %v)", bs)
	}
}

// TestSettledAcksIdleSession: on a session with no request in flight,
// SettledAcks sends what is pending on a request of its own and returns
// the batches' failures; a deferred batch's failure goes to Report.
func TestSettledAcksIdleSession(t *testing.T) {
	var s kit.AckSession[*ackRec, string]
	boom := errors.New("boom")
	var sent [][]int
	s.Send = func(p []*kit.AckBatch[*ackRec, string]) {
		for _, b := range p {
			sent = append(sent, ids(b.Handles))
			b.Finish(boom)
		}
	}
	var reported []error
	s.Report = func(b *kit.AckBatch[*ackRec, string], err error) { reported = append(reported, err) }
	gap := s.Queue([]*ackRec{{s: &s, id: 9, live: true}}, "gap", false)
	bs, _ := kit.GroupAcks([]*ackRec{{s: &s, id: 1, live: true}}, "accept", true, true, ackSessionOf)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := kit.SettledAcks(ctx, append([]*kit.AckBatch[*ackRec, string]{gap}, bs...), time.Millisecond); !errors.Is(err, boom) {
		t.Fatalf("SettledAcks = %v, want boom", err)
	}
	if !slices.EqualFunc(sent, [][]int{{9}, {1}}, slices.Equal) || len(reported) != 1 || !errors.Is(reported[0], boom) {
		t.Fatalf("sent %v, reported %v; want [9] [1] in one request, the deferred one reported", sent, reported)
	}
}

// TestSettledAcksBusySession: on a session with a request in flight,
// SettledAcks waits for that request to take and finish the batch; what
// Fail recorded comes back with it; ctx ends the wait.
func TestSettledAcksBusySession(t *testing.T) {
	var s kit.AckSession[*ackRec, string]
	s.Send = func(p []*kit.AckBatch[*ackRec, string]) {
		t.Errorf("Send of %d batch(es) while a request is in flight", len(p))
	}
	lost := errors.New("lost")
	s.Lock() // a request in flight
	b := s.Queue([]*ackRec{{s: &s, id: 1, live: true}}, "release", false)
	done := make(chan error, 1)
	go func() {
		done <- kit.SettledAcks(context.Background(), []*kit.AckBatch[*ackRec, string]{b}, time.Millisecond)
	}()
	select {
	case err := <-done:
		t.Fatalf("SettledAcks returned %v before the request finished its batch", err)
	case <-time.After(20 * time.Millisecond): // a bounded look for an early return, not a synchronisation
	}
	for _, p := range s.Take(true) {
		p.Fail(lost)
		p.Finish(nil)
	}
	s.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, lost) {
			t.Fatalf("SettledAcks = %v, want the recorded failure", err)
		}
	case <-time.After(wait):
		t.Fatalf("SettledAcks did not return within %v of its batch finishing", wait)
	}
	s.Lock()
	b = s.Queue(nil, "release", false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := kit.SettledAcks(ctx, []*kit.AckBatch[*ackRec, string]{b}, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SettledAcks with ctx ending = %v, want its error", err)
	}
	s.Unlock()
}
