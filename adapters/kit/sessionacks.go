package kit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// AckSession is one session of a broker protocol whose requests on it go
// one at a time (each carries the session's epoch or sequence number) and
// can carry the acknowledgements of the records the session acquired: a
// Kafka share session, whose next ShareFetch carries them, or a pull
// stream whose next request carries acknowledgement ids (Pub/Sub's
// StreamingPull). A settlement is queued on its records' session
// ([GroupAcks]) and rides on the next request the driver makes anyway:
// that request takes what is pending ([AckSession.Take]) and finishes it
// with the broker's answer ([AckBatch.Finish]). [SettledAcks] waits for
// the answer, sending what is pending on a request of its own (Send)
// when the session has none in flight. A session that was lost or
// reopened starts a new generation ([AckSession.Reset]): a record
// acquired under an earlier one is no longer the session's.
//
// H is the driver's record handle, K the outcome (an acknowledgement
// type). Set Send, and Report if wanted, before the session is used; it
// is safe for concurrent use.
type AckSession[H, K any] struct {
	// Send sends pending on a request of its own and finishes each batch;
	// the session is locked.
	Send func(pending []*AckBatch[H, K])
	// Report, when not nil, gets the failure of a deferred batch, which
	// no caller waits for.
	Report func(b *AckBatch[H, K], err error)

	mu      sync.Mutex // held for a request
	gen     atomic.Uint32
	pmu     sync.Mutex
	pending []*AckBatch[H, K]
}

// Lock holds the session for a request.
func (s *AckSession[H, K]) Lock() { s.mu.Lock() }

// TryLock holds the session for a request if none is in flight.
func (s *AckSession[H, K]) TryLock() bool { return s.mu.TryLock() }

// Unlock ends the request.
func (s *AckSession[H, K]) Unlock() { s.mu.Unlock() }

// Gen returns the session's generation: how many times it was reset.
func (s *AckSession[H, K]) Gen() uint32 { return s.gen.Load() }

// Reset starts a new generation: the session was lost or reopened.
func (s *AckSession[H, K]) Reset() { s.gen.Add(1) }

// Queue makes a batch of hs with kind and queues it for the next request.
func (s *AckSession[H, K]) Queue(hs []H, kind K, deferred bool) *AckBatch[H, K] {
	b := s.batch(hs, kind, deferred)
	s.queue(b)
	return b
}

func (s *AckSession[H, K]) batch(hs []H, kind K, deferred bool) *AckBatch[H, K] {
	return &AckBatch[H, K]{Handles: hs, Kind: kind, Deferred: deferred, s: s, fin: make(chan struct{})}
}

func (s *AckSession[H, K]) queue(b *AckBatch[H, K]) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.pending = append(s.pending, b)
}

// Take returns the pending batches: removed, for the request that
// carries them (all), or left pending, to wait for them.
func (s *AckSession[H, K]) Take(all bool) []*AckBatch[H, K] {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p := s.pending
	if !all {
		return slices.Clone(p)
	}
	s.pending = nil
	return p
}

// AckBatch is one settlement's acknowledgements of one kind on one
// [AckSession]. Deferred: no caller waits for it (its failure goes to the
// session's Report).
type AckBatch[H, K any] struct {
	Handles  []H
	Kind     K
	Deferred bool

	s   *AckSession[H, K]
	err error
	fin chan struct{}
}

// Session returns the batch's session.
func (b *AckBatch[H, K]) Session() *AckSession[H, K] { return b.s }

// Fail records err (some of the batch's records are lost) for Finish to
// return with the broker's answer.
func (b *AckBatch[H, K]) Fail(err error) { b.err = errors.Join(b.err, err) }

// Finish completes the batch with err (nil: the broker took every
// acknowledgement) and what Fail recorded; a deferred batch that failed
// goes to Report. It is called once.
func (b *AckBatch[H, K]) Finish(err error) {
	b.err = errors.Join(b.err, err)
	if b.Deferred && b.err != nil && b.s.Report != nil {
		b.s.Report(b, b.err)
	}
	close(b.fin)
}

// Done is closed once the batch finished.
func (b *AckBatch[H, K]) Done() <-chan struct{} { return b.fin }

// Err returns the batch's failure once Done is closed.
func (b *AckBatch[H, K]) Err() error { return b.err }

// GroupAcks groups the acknowledgements of hs with kind into one batch per
// session, in the order of their first handle, and queues them when queue
// is true (a driver sends some kinds, a lock renewal say, on requests of
// their own). session returns h's session and whether h is still live
// there (acquired in the session's current generation, its lock not
// lapsed); lost counts the handles left out as not live, which the broker
// has taken back.
func GroupAcks[H, K any](hs []H, kind K, deferred, queue bool, session func(h H) (*AckSession[H, K], bool)) (bs []*AckBatch[H, K], lost int) {
	for _, h := range hs {
		s, live := session(h)
		if !live {
			lost++
			continue
		}
		i := slices.IndexFunc(bs, func(b *AckBatch[H, K]) bool { return b.s == s }) // few sessions: one per broker
		if i < 0 {
			i, bs = len(bs), append(bs, s.batch(make([]H, 0, len(hs)), kind, deferred))
		}
		bs[i].Handles = append(bs[i].Handles, h)
	}
	for _, b := range bs {
		if queue {
			b.s.queue(b)
		}
	}
	return bs, lost
}

// SettledAcks returns once every batch of bs finished, with their
// failures, or when ctx is done (with what finished and ctx's error).
// What is pending on a session with no request in flight is sent at once
// on a request of its own (Send), on a busy one tried again every linger:
// the request in flight may have taken it.
func SettledAcks[H, K any](ctx context.Context, bs []*AckBatch[H, K], linger time.Duration) error {
	var errs []error
	for _, b := range bs {
		for s, done := b.s, false; !done; {
			if s.TryLock() {
				if p := s.Take(true); len(p) > 0 {
					s.Send(p)
				}
				s.Unlock()
			}
			select {
			case <-b.fin:
				done = true
			case <-time.After(linger):
			case <-ctx.Done():
				return errors.Join(append(errs, ctx.Err())...)
			}
		}
		errs = append(errs, b.err)
	}
	return errors.Join(errs...)
}
