package kit

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Prefetcher is the one fetching goroutine of a subscription whose broker
// hands records out on requests the client makes (a pull: a Kafka share
// group's ShareFetch, a JetStream pull, an SQS or Pub/Sub receive), from
// Subscribe to Close. It fetches when the receiver ([Prefetcher.Receive],
// the driver's ReceiveBatch) finds nothing buffered, and prefetches while
// the handlers keep up with a backlog, so that the next window comes (and
// carries their acknowledgements, on a broker whose fetch can) while they
// work on this one.
//
// A fetch asks for the window, at first the in-flight window
// (PrefetchOptions.InFlight), however few slots are free. A fetch that
// brings all it asked for while the handlers settled records since the
// last one ([Prefetcher.Settled]) doubles the window, up to Max (the
// in-flight window if that is larger); one that brings less (the backlog
// is drained), or while nothing was settled (one slow handler holding the
// in-flight window), sets it back to the in-flight window. While the
// window is grown the next one is prefetched as long as at most a window
// and an in-flight window are held (acquired and not settled): the other
// consumers of the queue get records again once the backlog is drained.
// Without Grow a fetch asks for what the receiver asks for and nothing is
// prefetched. Create it with [NewPrefetcher]; Stop ends it.
type Prefetcher[T any] struct {
	o             PrefetchOptions[T]
	stop          context.CancelFunc
	done          chan struct{}
	kick, arrived chan struct{} // capacity 1
	settled       atomic.Int64  // records settled since the last fetch

	mu      sync.Mutex
	buf     [][]T // fetched, not received yet: each fetch's records, none empty
	waiting bool  // Receive waits for records
	want    int   // its max
	window  int
	err     error // a failed fetch, for Receive
}

// PrefetchOptions configure a [Prefetcher]. Fetch and Held are required.
type PrefetchOptions[T any] struct {
	// Fetch fetches up to want records; what it returns is buffered, and
	// its error goes to a waiting Receive when it returns none.
	Fetch func(ctx context.Context, want int) ([]T, error)
	// Held returns how many records are acquired and not settled, buffered
	// or out with handlers.
	Held func() int
	// Idle, when not nil, is called Linger after a receive or settlement
	// that left no fetch to make (a driver sends the acknowledgements no
	// fetch took).
	Idle   func(ctx context.Context)
	Linger time.Duration
	// InFlight is the in-flight window, Max the largest fetch window.
	InFlight, Max int
	// Grow lets the window grow and prefetch (a driver that renews the
	// locks of buffered records).
	Grow bool
}

// NewPrefetcher starts the fetcher, with buf buffered already.
func NewPrefetcher[T any](o PrefetchOptions[T], buf []T) *Prefetcher[T] {
	p := &Prefetcher[T]{o: o, done: make(chan struct{}), kick: make(chan struct{}, 1), arrived: make(chan struct{}, 1)}
	if len(buf) > 0 {
		p.buf = [][]T{buf}
	}
	ctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.run(ctx)
	return p
}

// Receive returns up to max buffered records of one fetch (handed out
// where the fetch returned them, not copied), waiting for the fetcher
// until one comes, a fetch fails (its error) or ctx is done.
func (p *Prefetcher[T]) Receive(ctx context.Context, max int) ([]T, error) {
	p.mu.Lock()
	for len(p.buf) == 0 {
		if err := cmp.Or(p.err, ctx.Err()); err != nil {
			p.err = nil
			p.mu.Unlock()
			return nil, err
		}
		p.waiting, p.want = true, max
		p.mu.Unlock()
		Signal(p.kick)
		select {
		case <-p.arrived:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.waiting = false
	}
	first := p.buf[0]
	n := min(max, len(first))
	out := first[:n:n]
	if p.buf[0] = first[n:]; n == len(first) {
		p.buf[0] = nil
		p.buf = p.buf[1:]
	}
	p.mu.Unlock()
	Signal(p.kick) // a window may be prefetched
	return out, nil
}

// Settled counts n records settled (0: a settlement failed) and wakes the
// fetcher.
func (p *Prefetcher[T]) Settled(n int) {
	p.settled.Add(int64(n))
	Signal(p.kick)
}

// Stop ends the fetcher once the fetch in flight returned.
func (p *Prefetcher[T]) Stop() {
	p.stop()
	<-p.done
}

// next returns what the next fetch asks for, 0 for none.
func (p *Prefetcher[T]) next() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := max(p.window, p.o.InFlight)
	if !p.o.Grow {
		want = p.want
	}
	if !(p.waiting && len(p.buf) == 0) && (p.window <= p.o.InFlight || p.o.Held() > want+p.o.InFlight) {
		return 0
	}
	return want
}

func (p *Prefetcher[T]) run(ctx context.Context) {
	defer close(p.done)
	var linger <-chan time.Time
	for ctx.Err() == nil {
		if want := p.next(); want > 0 {
			recs, err := p.o.Fetch(ctx, want)
			p.mu.Lock()
			if p.window = p.o.InFlight; len(recs) > 0 {
				p.buf = append(p.buf, recs)
			}
			if len(recs) >= want && p.settled.Swap(0) > 0 && p.o.Grow {
				p.window = min(2*want, max(p.o.Max, p.o.InFlight))
			}
			if err != nil && len(recs) == 0 && ctx.Err() == nil {
				p.err, p.waiting = err, false
			}
			p.mu.Unlock()
			Signal(p.arrived)
			continue
		}
		select {
		case <-ctx.Done():
		case <-p.kick:
			if linger == nil {
				linger = time.After(p.o.Linger)
			}
		case <-linger:
			linger = nil
			if p.o.Idle != nil {
				p.o.Idle(ctx)
			}
		}
	}
}
