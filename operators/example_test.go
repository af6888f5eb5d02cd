package operators_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

type Order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

type Reading struct {
	Device string  `json:"device"`
	Value  float64 `json:"value"`
}

// demo runs build over the in-process broker: it starts the pipeline,
// sends each message, waits until n deliveries were settled, stops, and
// prints the settlement counts.
func demo(sp ports.SubscriptionSpec, n int, build func(p *flow.Pipeline), msgs ...ports.Message) {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)
	p := flow.New(a, sp, flow.WithErrorHandler(func(error) {}))
	build(p)
	if err := p.Start(ctx); err != nil {
		panic(err)
	}
	for _, m := range msgs {
		if err := a.Send(ctx, m); err != nil {
			panic(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s := p.Stats(); s.Acked+s.Requeued+s.DeadLettered < int64(n) && time.Now().Before(deadline); s = p.Stats() {
		time.Sleep(time.Millisecond)
	}
	_ = p.Stop(ctx)
	s := p.Stats()
	fmt.Printf("acked %d, requeued %d, dead-lettered %d\n", s.Acked, s.Requeued, s.DeadLettered)
}

func order(id string, total int) ports.Message {
	b, _ := json.Marshal(Order{ID: id, Total: total})
	return ports.Message{Topic: "orders", Key: id, Payload: b, Headers: ports.NewHeaders(ports.HeaderID, id)}
}

func reading(device string, v float64) ports.Message {
	b, _ := json.Marshal(Reading{Device: device, Value: v})
	return ports.Message{Topic: "readings", Key: device, Payload: b}
}

var orders = ports.SubscriptionSpec{Topic: "orders", Group: "billing", Retry: ports.RetryPolicy{MaxAttempts: 1}}

// One handler call per batch; its one outcome settles every member.
func ExampleBatch() {
	demo(orders, 3, func(p *flow.Pipeline) {
		batches := operators.Batch(flow.Decode[Order](p.Source()), operators.BatchOptions{Size: 3, Window: time.Minute})
		flow.Sink(batches, func(_ context.Context, b operators.Batched[Order]) error {
			fmt.Println("batch of", b.Len(), "first", b.Values[0].ID)
			return nil // one outcome: every member acked
		})
	}, order("o-1", 5), order("o-2", 7), order("o-3", 9))
	// Output:
	// batch of 3 first o-1
	// acked 3, requeued 0, dead-lettered 0
}

// With IsolatePoison the handler names the bad members: they are
// dead-lettered with their reason, the rest of the batch is acked.
func ExampleBatch_isolatePoison() {
	demo(orders, 3, func(p *flow.Pipeline) {
		batches := operators.Batch(flow.Decode[Order](p.Source()), operators.BatchOptions{Size: 3, Window: time.Minute, IsolatePoison: true})
		flow.Sink(batches, func(_ context.Context, b operators.Batched[Order]) error {
			var bad operators.BatchError
			for i, o := range b.Values {
				if o.Total < 0 {
					bad.Add(i, fmt.Errorf("order %s: negative total", o.ID))
				}
			}
			return bad.Err()
		})
	}, order("o-1", 5), order("o-2", -7), order("o-3", 9))
	// Output:
	// acked 2, requeued 0, dead-lettered 1
}

// A *flow.MemberOutcomes settles each member on its own: requeue these,
// dead-letter these, ack the rest.
func ExampleBatch_memberOutcomes() {
	sp := orders
	sp.Retry = ports.RetryPolicy{MaxAttempts: 5, Backoff: time.Minute, MaxBackoff: time.Minute}
	demo(sp, 3, func(p *flow.Pipeline) {
		batches := operators.Batch(flow.Decode[Order](p.Source()), operators.BatchOptions{Size: 3, Window: time.Minute})
		flow.Sink(batches, func(_ context.Context, b operators.Batched[Order]) error {
			var out flow.MemberOutcomes
			for i, o := range b.Values {
				switch {
				case o.Total < 0:
					out.DeadLetter(i, fmt.Errorf("order %s: negative total", o.ID))
				case o.Total > 1000:
					out.Requeue(i, fmt.Errorf("order %s: credit check busy", o.ID))
				}
			}
			return out.Err()
		})
	}, order("o-1", 5), order("o-2", 5000), order("o-3", -7))
	// Output:
	// acked 1, requeued 1, dead-lettered 1
}

var errUnknownSKU = errors.New("unknown sku")

// Errors matching a rule become poison: dead-lettered at once instead of
// burning retries.
func ExampleClassify() {
	sp := orders
	sp.Retry.MaxAttempts = 5
	demo(sp, 1, func(p *flow.Pipeline) {
		classified := operators.Classify(p.Source(), operators.Classifier{Rules: []operators.Rule{operators.PoisonIs(errUnknownSKU)}})
		flow.Sink(flow.Decode[Order](classified), func(context.Context, Order) error {
			return fmt.Errorf("line 2: %w", errUnknownSKU)
		})
	}, order("o-1", 5))
	// Output:
	// acked 0, requeued 0, dead-lettered 1
}

func ExampleClassifier_Classify() {
	c := operators.Classifier{Rules: []operators.Rule{operators.PoisonIs(errUnknownSKU)}}
	fmt.Println(ports.IsPoison(c.Classify(errUnknownSKU)))
	fmt.Println(ports.IsPoison(c.Classify(json.Unmarshal([]byte("{"), new(Order))))) // a default rule
	fmt.Println(ports.IsPoison(c.Classify(errors.New("db timeout"))))
	// Output:
	// true
	// true
	// false
}

// Local retries with backoff before the delivery is given back.
func ExampleRetry() {
	calls := 0
	demo(orders, 1, func(p *flow.Pipeline) {
		flow.Sink(flow.Decode[Order](p.Source()), operators.Retry(func(context.Context, Order) error {
			calls++
			if calls < 3 {
				return errors.New("db busy")
			}
			return nil
		}, operators.RetryOptions{Attempts: 3, Backoff: time.Millisecond}))
	}, order("o-1", 5))
	fmt.Println("calls:", calls)
	// Output:
	// acked 1, requeued 0, dead-lettered 0
	// calls: 3
}

// A delivery redelivered too often is dead-lettered without being handled.
func ExampleRedeliveryLimit() {
	sp := orders
	sp.Retry = ports.RetryPolicy{MaxAttempts: 10, NoBackoff: true}
	handled := 0
	demo(sp, 3, func(p *flow.Pipeline) {
		flow.Sink(operators.RedeliveryLimit(p.Source(), 2), func(context.Context, *ports.Delivery) error {
			handled++
			return errors.New("crashes the handler")
		})
	}, order("o-1", 5))
	fmt.Println("handled:", handled)
	// Output:
	// acked 0, requeued 2, dead-lettered 1
	// handled: 2
}

func ExampleDelay() {
	var waited time.Duration
	demo(orders, 1, func(p *flow.Pipeline) {
		flow.Sink(operators.Delay(p.Source(), 20*time.Millisecond), func(_ context.Context, d *ports.Delivery) error {
			waited = time.Since(d.ReceivedAt)
			return nil
		})
	}, order("o-1", 5))
	fmt.Println("held at least 20ms:", waited >= 20*time.Millisecond)
	// Output:
	// acked 1, requeued 0, dead-lettered 0
	// held at least 20ms: true
}

// Up to Limit calls at once; Ordered keeps the input order.
func ExampleConcurrent() {
	var got []string
	demo(orders, 4, func(p *flow.Pipeline) {
		priced := operators.Concurrent(flow.Decode[Order](p.Source()), func(_ context.Context, o Order) (string, error) {
			return fmt.Sprintf("%s=%d", o.ID, o.Total*2), nil
		}, operators.ConcurrentOptions{Limit: 3, Ordered: true})
		flow.Sink(priced, func(_ context.Context, s string) error { got = append(got, s); return nil })
	}, order("o-1", 1), order("o-2", 2), order("o-3", 3), order("o-4", 4))
	fmt.Println(strings.Join(got, " "))
	// Output:
	// acked 4, requeued 0, dead-lettered 0
	// o-1=2 o-2=4 o-3=6 o-4=8
}

// Parallel across keys, in order within a key.
func ExampleKeyOrdered() {
	var mu sync.Mutex
	perDevice := map[string][]float64{}
	demo(ports.SubscriptionSpec{Topic: "readings", Group: "g"}, 6, func(p *flow.Pipeline) {
		rs := operators.KeyOrdered(flow.Decode[Reading](p.Source()), func(_ context.Context, r Reading) (Reading, error) { return r, nil },
			operators.KeyOrderedOptions[Reading]{Limit: 2})
		flow.Sink(rs, func(_ context.Context, r Reading) error {
			mu.Lock()
			perDevice[r.Device] = append(perDevice[r.Device], r.Value)
			mu.Unlock()
			return nil
		})
	}, reading("a", 1), reading("b", 10), reading("a", 2), reading("b", 20), reading("a", 3), reading("b", 30))
	fmt.Println(perDevice["a"], perDevice["b"])
	// Output:
	// acked 6, requeued 0, dead-lettered 0
	// [1 2 3] [10 20 30]
}

// A handler that overruns its deadline fails with a TimeoutError
// (requeued), whatever it returns afterwards.
func ExampleTimeout() {
	sp := orders
	sp.Retry.MaxAttempts = 5
	demo(sp, 1, func(p *flow.Pipeline) {
		flow.Sink(operators.Timeout(p.Source(), 10*time.Millisecond), func(ctx context.Context, _ *ports.Delivery) error {
			<-ctx.Done() // too slow: the deadline passes first
			return nil   // refused: the item already failed with the timeout
		})
	}, order("o-1", 5))
	// Output:
	// acked 0, requeued 1, dead-lettered 0
}

func ExampleThrottle() {
	start := time.Now()
	demo(orders, 3, func(p *flow.Pipeline) {
		flow.Sink(operators.Throttle(p.Source(), operators.ThrottleOptions{Rate: 100}), func(context.Context, *ports.Delivery) error { return nil })
	}, order("o-1", 1), order("o-2", 2), order("o-3", 3))
	fmt.Println("took at least 20ms:", time.Since(start) >= 20*time.Millisecond)
	// Output:
	// acked 3, requeued 0, dead-lettered 0
	// took at least 20ms: true
}

// A second delivery of the same message id is acked without handling.
func ExampleDedupe() {
	handled := 0
	demo(orders, 2, func(p *flow.Pipeline) {
		flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{}), func(context.Context, *ports.Delivery) error {
			handled++
			return nil
		})
	}, order("o-1", 5), order("o-1", 5))
	fmt.Println("handled:", handled)
	// Output:
	// acked 2, requeued 0, dead-lettered 0
	// handled: 1
}

// Per-device sums over tumbling windows; each reading is acked only after
// the aggregate it went into was stored.
func ExampleWindow() {
	var mu sync.Mutex
	stored := map[string]float64{}
	demo(ports.SubscriptionSpec{Topic: "readings", Group: "agg"}, 4, func(p *flow.Pipeline) {
		panes := operators.Window(flow.Decode[Reading](p.Source()),
			operators.WindowOptions[Reading, string]{Size: 50 * time.Millisecond, Key: func(it flow.Item[Reading]) string { return it.Value.Device }},
			func(sum float64, r Reading) float64 { return sum + r.Value })
		flow.Sink(panes, func(_ context.Context, pn operators.Pane[string, float64]) error {
			mu.Lock()
			stored[pn.Key] += pn.Value // "store the aggregate"; then every reading in it is acked
			mu.Unlock()
			return nil
		})
	}, reading("dev-1", 1.5), reading("dev-2", 10), reading("dev-1", 2.5), reading("dev-2", 5))
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range stored {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Println(k, stored[k])
	}
	// Output:
	// acked 4, requeued 0, dead-lettered 0
	// dev-1 4
	// dev-2 15
}

func ExampleAttempt() {
	sp := orders
	sp.Retry = ports.RetryPolicy{MaxAttempts: 3, NoBackoff: true}
	var seen []int
	demo(sp, 2, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
			seen = append(seen, operators.Attempt(ctx))
			if len(seen) == 1 {
				return errors.New("first try fails")
			}
			return nil
		})
	}, order("o-1", 5))
	sort.Ints(seen)
	fmt.Println("attempts:", seen)
	// Output:
	// acked 1, requeued 1, dead-lettered 0
	// attempts: [1 2]
}
