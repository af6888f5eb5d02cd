package rxbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/reactivex/rxgo/v2"

	"github.com/sluicemq/sluice/flow"
)

// Option configures Through.
type Option func(*config)

type config struct{ onLost func(int) }

// OnLost receives the number of items the chain neither emitted nor
// completed, counted when the chain ends; they were cancelled (not
// settled: the broker redelivers them). Default: logged at Warn level with
// slog.Default().
func OnLost(f func(n int)) Option { return func(c *config) { c.onLost = f } }

// ErrChainEnded is the fatal error of a chain that completed while its
// input was still open (a Take, a First): the pipeline stops rather than
// leave the rest of the input unhandled.
var ErrChainEnded = errors.New("rxbridge: the rxgo chain completed before its input")

// ErrLost is the cancellation cause of an item the chain neither emitted
// nor completed.
var ErrLost = errors.New("rxbridge: item lost in the rxgo chain")

// Through runs the items of in through an rxgo chain and back into the
// pipeline. chain receives an Observable of *Msg[In] (bound to the
// pipeline's context: it ends when the pipeline stops) and must return one
// of *Msg[Out] — built with Map, Keep, Joined and With, see the package
// rules. Each *Msg[Out] that reaches the end becomes a flow.Item[Out] with
// its completion; completed ones are skipped.
//
// Settlement: unchanged by the bridge — each input is completed by the
// helpers, or downstream of Through. When the chain ends, inputs that
// neither left it nor completed are cancelled (no settlement) and
// reported with OnLost. Order is whatever the chain makes it.
func Through[In, Out any](in flow.Stream[In], chain func(rxgo.Observable) rxgo.Observable, opts ...Option) flow.Stream[Out] {
	cfg := config{onLost: func(n int) { slog.Warn("sluice rxbridge: items lost in the rxgo chain were cancelled", "n", n) }}
	for _, o := range opts {
		o(&cfg)
	}
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[In], out chan<- flow.Item[Out]) error {
		return through(ctx, src, out, chain, cfg)
	})
}

func through[In, Out any](ctx context.Context, src <-chan flow.Item[In], out chan<- flow.Item[Out], chain func(rxgo.Observable) rxgo.Observable, cfg config) error {
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr := &tracker{live: map[*flow.Completion]struct{}{}, sweepAt: 64}
	feed := make(chan rxgo.Item)
	inputClosed := false
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the producer: pipeline items into the Observable
		defer wg.Done()
		defer close(feed)
		for {
			select {
			case it, ok := <-src:
				if !ok {
					inputClosed = true
					return
				}
				if err := it.Ctx.Err(); err != nil {
					_ = it.Completion.Cancel(err)
					continue
				}
				tr.add(it.Completion)
				m := &Msg[In]{Ctx: it.Ctx, Value: it.Value, Delivery: it.Msg, c: it.Completion}
				select {
				case feed <- rxgo.Of(m):
				case <-bctx.Done():
					return // it is tracked: cancelled below
				}
			case <-bctx.Done():
				return
			}
		}
	}()

	var fatal error
	obs := chain(rxgo.FromChannel(feed, rxgo.WithContext(bctx)))
	for item := range obs.Observe() {
		if item.E != nil {
			if fatal == nil {
				fatal = fmt.Errorf("rxbridge: error at the end of the chain: %w", item.E)
			}
			continue
		}
		m, err := msgOf[Out](item.V)
		if err != nil {
			if fatal == nil {
				fatal = err
			}
			continue
		}
		tr.emitted(m)
		if m.Done() {
			continue
		}
		out <- flow.Item[Out]{Ctx: m.Ctx, Value: m.Value, Msg: m.Delivery, Completion: m.c}
	}
	cancel()
	wg.Wait()
	stopping := ctx.Err()
	cause := fatal
	if cause == nil {
		cause = stopping
	}
	if cause == nil {
		cause = ErrLost
	}
	if n := tr.cancelPending(cause); n > 0 && stopping == nil {
		cfg.onLost(n)
	}
	switch {
	case fatal != nil:
		return fatal // Operate cancels the rest of the input
	case inputClosed:
		return nil
	case stopping != nil:
		for it := range src { // the pipeline is stopping: its input will close
			_ = it.Completion.Cancel(stopping)
		}
		return nil
	}
	return ErrChainEnded
}

// tracker remembers the inputs inside the chain, to cancel the ones it
// loses. Completed inputs are swept out as the map grows.
type tracker struct {
	mu      sync.Mutex
	live    map[*flow.Completion]struct{}
	sweepAt int
}

func (t *tracker) add(c *flow.Completion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[c] = struct{}{}
	if len(t.live) >= t.sweepAt {
		for x := range t.live {
			if x.Outcome().Kind != flow.Pending {
				delete(t.live, x)
			}
		}
		t.sweepAt = max(64, 2*len(t.live))
	}
}

// emitted forgets the inputs behind m: they left the chain.
func (t *tracker) emitted(m interface {
	inputList() (*flow.Completion, []*flow.Completion)
}) {
	one, many := m.inputList()
	t.mu.Lock()
	if many == nil {
		delete(t.live, one)
	}
	for _, c := range many {
		delete(t.live, c)
	}
	t.mu.Unlock()
}

func (t *tracker) cancelPending(cause error) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for c := range t.live {
		if c.Outcome().Kind == flow.Pending {
			_ = c.Cancel(cause)
			n++
		}
	}
	t.live = nil
	return n
}
