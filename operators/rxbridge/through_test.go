package rxbridge_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reactivex/rxgo/v2"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/rxbridge"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var spec = ports.SubscriptionSpec{Topic: "nums", Group: "g", Retry: ports.RetryPolicy{MaxAttempts: 1, NoBackoff: true}}

// env is a broker, an adapter and a pipeline built by build.
type env struct {
	b *mem.Broker
	a *mem.Adapter
	p *flow.Pipeline
}

func start(t *testing.T, sp ports.SubscriptionSpec, build func(p *flow.Pipeline), opts ...flow.Option) *env {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{b: b, a: a, p: flow.New(a, sp, opts...)}
	build(e.p)
	if err := e.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.p.Stop(ctx)
		_ = a.Close(ctx)
		_ = b.Close(ctx)
	})
	return e
}

func (e *env) send(t *testing.T, payloads ...string) {
	t.Helper()
	for _, s := range payloads {
		if err := e.a.Send(context.Background(), ports.Message{Topic: "nums", Payload: []byte(s)}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitStats waits until ok holds for the pipeline's stats, failing after 10s.
func (e *env) waitStats(t *testing.T, what string, ok func(flow.Stats) bool) flow.Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.p.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s: %+v", what, s)
		}
		time.Sleep(time.Millisecond) // polling counters, bounded
	}
}

func atoi(_ context.Context, d *ports.Delivery) (int, error) {
	n, err := strconv.Atoi(string(d.Payload))
	if err != nil {
		return 0, ports.Poison(err)
	}
	if n == 13 {
		return 0, errors.New("unlucky")
	}
	if n == 99 {
		panic("boom")
	}
	return n, nil
}

func even(_ context.Context, n int) (bool, error) { return n%2 == 0, nil }

func TestThroughSettlesEveryItemExactlyOnce(t *testing.T) {
	var sum atomic.Int64
	e := start(t, spec, func(p *flow.Pipeline) {
		out := rxbridge.Through[*ports.Delivery, int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
			return o.Map(rxbridge.Map(atoi)).Filter(rxbridge.Keep(even))
		})
		flow.Sink(out, func(_ context.Context, n int) error { sum.Add(int64(n)); return nil })
	})
	e.send(t, "1", "2", "3", "4", "x", "13", "99", "6")
	s := e.waitStats(t, "8 settlements", func(s flow.Stats) bool { return s.Acked+s.Requeued+s.DeadLettered == 8 })
	// 1,2,3,4,6 acked (odd ones dropped by Keep); x poison; 13 and 99 fail (requeue bound 1: dead letter).
	if s.Acked != 5 || s.DeadLettered != 3 || s.Conflicts != 0 {
		t.Fatalf("stats %+v, want 5 acked, 3 dead-lettered, no conflicts", s)
	}
	if sum.Load() != 12 {
		t.Fatalf("sum %d, want 2+4+6", sum.Load())
	}
}

func TestThroughJoinedBufferIsOneBatch(t *testing.T) {
	sp := spec
	sp.InFlight = 6
	var batches atomic.Int32
	e := start(t, sp, func(p *flow.Pipeline) {
		out := rxbridge.Through[*ports.Delivery, []int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
			return o.Map(rxbridge.Map(atoi)).BufferWithCount(3).Map(rxbridge.Joined[int]())
		})
		flow.Sink(out, func(_ context.Context, b []int) error {
			batches.Add(1)
			if len(b) != 3 {
				return fmt.Errorf("batch of %d", len(b))
			}
			return nil
		})
	})
	e.send(t, "1", "2", "3", "4", "5", "6")
	s := e.waitStats(t, "6 acks", func(s flow.Stats) bool { return s.Acked == 6 })
	if batches.Load() != 2 || s.Requeued != 0 {
		t.Fatalf("%d batches, stats %+v; want 2 batches of 3, all acked", batches.Load(), s)
	}
}

func TestThroughCancelsItemsLostByRawOperators(t *testing.T) {
	var lost atomic.Int32
	e := start(t, spec, func(p *flow.Pipeline) {
		out := rxbridge.Through[*ports.Delivery, *ports.Delivery](p.Source(), func(o rxgo.Observable) rxgo.Observable {
			return o.Filter(func(v any) bool { // a raw filter that drops without completing
				return string(v.(*rxbridge.Msg[*ports.Delivery]).Value.Payload) != "drop"
			})
		}, rxbridge.OnLost(func(n int) { lost.Add(int32(n)) }))
		flow.Sink(out, func(context.Context, *ports.Delivery) error { return nil })
	})
	e.send(t, "keep", "drop", "keep")
	e.waitStats(t, "2 acks", func(s flow.Stats) bool { return s.Acked == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.p.Stop(ctx) // the input closes, the chain ends, and the item it dropped is cancelled and reported
	if s := e.p.Stats(); s.Acked != 2 || s.Cancelled != 1 {
		t.Fatalf("stats %+v, want 2 acked and the dropped one cancelled (not settled)", s)
	}
	if lost.Load() != 1 {
		t.Fatalf("OnLost reported %d, want 1", lost.Load())
	}
}

func TestThroughChainEndingEarlyIsFatal(t *testing.T) {
	b, _ := mem.NewBroker()
	defer b.Close(context.Background())
	a, _ := mem.New(b)
	defer a.Close(context.Background())
	p := flow.New(a, spec, flow.WithDrainTimeout(0))
	out := rxbridge.Through[*ports.Delivery, *ports.Delivery](p.Source(), func(o rxgo.Observable) rxgo.Observable { return o.Take(1) })
	flow.Sink(out, func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_ = a.Send(context.Background(), ports.Message{Topic: "nums", Payload: []byte(strconv.Itoa(i))})
	}
	select {
	case <-p.Done():
		t.Fatal("pipeline stopped on its own")
	default:
	}
	deadline := time.After(10 * time.Second)
	for p.Err() == nil {
		select {
		case <-deadline:
			t.Fatal("no fatal error within 10s")
		case <-time.After(time.Millisecond): // polling Err, bounded
		}
	}
	if err := p.Err(); !errors.Is(err, rxbridge.ErrChainEnded) {
		t.Fatalf("fatal error %v, want ErrChainEnded", err)
	}
	_ = p.Stop(context.Background())
	if s := p.Stats(); s.Acked > 1 || s.DeadLettered+s.Requeued != 0 {
		t.Fatalf("stats %+v: only the taken item may be acked, the rest stay unsettled", s)
	}
}

func TestThroughStopCancelsAndSettlesNothing(t *testing.T) {
	entered := make(chan struct{}, 1)
	e := start(t, spec, func(p *flow.Pipeline) {
		out := rxbridge.Through[*ports.Delivery, int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
			return o.Map(rxbridge.Map(atoi))
		})
		flow.Sink(out, func(ctx context.Context, _ int) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
	})
	e.send(t, "1", "2", "3")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not reached within 10s")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = e.p.Stop(ctx)
	if s := e.p.Stats(); s.Acked+s.Requeued+s.DeadLettered != 0 || s.Cancelled != s.Received {
		t.Fatalf("stats %+v, want everything received cancelled and nothing settled", s)
	}
}
