// Command quickstart shows sluice's settlement contract on the embedded
// in-process broker: nothing to install.
//
//	go run ./examples/quickstart
//
// It publishes a few hundred orders with confirms. Some payloads are
// malformed (poison: dead-lettered with the reason, never retried), some
// fail transiently and succeed on a redelivery, a few fail every time
// (dead-lettered once their retries are exhausted). A live summary shows
// what happens; the program exits 0 when every message ended acked or
// dead-lettered.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Order is the business payload.
type Order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

const (
	total   = 300
	topic   = ports.Topic("orders")
	timeout = 60 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// tally records what happened to every message, from pipeline events.
type tally struct {
	mu          sync.Mutex
	delivered   int
	acked       map[string]bool
	dead        map[string]string // id → reason
	requeued    int
	redelivered map[int]int // redelivery count → deliveries seen with it
}

func (t *tally) observe(e flow.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case e.Received:
		t.delivered++
		t.redelivered[e.Delivery.RedeliveryCount]++
	case e.Action == ports.Ack:
		t.acked[e.Delivery.ID] = true
	case e.Action == ports.Requeue:
		t.requeued++
	}
}

func (t *tally) deadLetter(id, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dead[id] = reason
}

func (t *tally) line(inFlight int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("delivered %4d | acked %3d | requeued %3d | dead-lettered %3d | in flight %2d",
		t.delivered, len(t.acked), t.requeued, len(t.dead), inFlight)
}

func run(ctx context.Context) error {
	broker, err := mem.NewBroker()
	if err != nil {
		return err
	}
	defer broker.Close(context.Background())
	a, err := mem.New(broker)
	if err != nil {
		return err
	}
	fmt.Printf("adapter %s, capabilities: %s\n\n", a.Name(), a.Capabilities())

	t := &tally{acked: map[string]bool{}, dead: map[string]string{}, redelivered: map[int]int{}}

	// The topics, declared once: specs and sends are built from the
	// registry, and a topic it does not hold is refused.
	reg, err := ports.NewRegistry(
		ports.TopicSpec{Topic: topic},
		ports.TopicSpec{Topic: ports.DeadLetterTopic(topic), NoDeadLetter: true},
	)
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}

	// The dead-letter receiver: reads <topic>.dlq and records the reasons.
	dlqSpec, err := reg.Subscription(ports.DeadLetterTopic(topic), "ops")
	if err != nil {
		return err
	}
	dlq := flow.New(a, dlqSpec)
	flow.Sink(dlq.Source(), func(_ context.Context, d *ports.Delivery) error {
		t.deadLetter(d.ID, d.Headers.Get(ports.HeaderDeadLetterReason))
		return nil
	})

	// The business pipeline: decode (malformed → poison), validate, handle.
	spec, err := reg.Subscription(topic, "billing")
	if err != nil {
		return err
	}
	spec.InFlight = 32
	spec.Retry = ports.RetryPolicy{MaxAttempts: 4, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	p := flow.New(a, spec, flow.WithObserver(t.observe), flow.WithDrainTimeout(5*time.Second))
	orders := flow.Decode[Order](p.Source())
	valid := flow.Map(orders, func(_ context.Context, o Order) (Order, error) {
		if o.Total < 0 {
			return o, ports.Poisonf("order %s: negative total %d", o.ID, o.Total)
		}
		return o, nil
	})
	flow.Sink(valid, bill, flow.Workers(8))

	for _, pl := range []*flow.Pipeline{dlq, p} {
		if err := pl.Start(ctx); err != nil {
			return err
		}
	}
	stopAll := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
		_ = dlq.Stop(sctx)
	}
	defer stopAll()

	if err := publish(ctx, reg.Sender(a)); err != nil {
		return err
	}
	fmt.Printf("published %d orders with confirms: every 10th malformed, every 25th invalid,\n", total)
	fmt.Println("every 7th fails twice before it succeeds, o-077 always fails (4 attempts allowed)")
	fmt.Println()

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		line := t.line(p.Stats().InFlight)
		t.mu.Lock()
		finished := len(t.acked)+len(t.dead) == total
		t.mu.Unlock()
		fmt.Println(line)
		if finished {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("not every message settled before the deadline: %s", t.line(p.Stats().InFlight))
		}
	}
	stopAll()
	return summarize(t, p.Stats())
}

// publish sends the orders: every 10th payload is malformed, every 25th has
// a negative total (both poison), the rest are valid.
func publish(ctx context.Context, a ports.Sender) error {
	msgs := make([]ports.Message, 0, total)
	for i := range total {
		o := Order{ID: fmt.Sprintf("o-%03d", i), Total: 10 + i}
		if i%25 == 24 {
			o.Total = -1
		}
		m, err := flow.NewMessage(flow.WithRequestID(ctx, "req-"+o.ID), topic, o, flow.Key(o.ID))
		if err != nil {
			return err
		}
		if i%10 == 9 {
			m.Payload = []byte(`{"id": "` + o.ID + `", "total": 1`) // truncated JSON
		}
		msgs = append(msgs, m)
	}
	return a.Send(ctx, msgs...)
}

// bill is the business handler: some orders hit a transient failure on
// their first deliveries, order o-077 fails on every delivery.
func bill(ctx context.Context, o Order) error {
	d := flow.DeliveryFrom(ctx)
	var n int
	fmt.Sscanf(o.ID, "o-%d", &n)
	select { // simulated work: 5–25ms per order
	case <-time.After(time.Duration(5+n%20) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err() // stopping: the order is not settled and will be redelivered
	}
	switch {
	case n == 77:
		return errors.New("payment gateway rejected the card")
	case n%7 == 3 && d.RedeliveryCount < 2:
		return fmt.Errorf("payment gateway timeout (attempt %d)", d.RedeliveryCount+1)
	}
	return nil
}

func summarize(t *tally, s flow.Stats) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Printf("\ndone: %d published, %d acked, %d dead-lettered, %d requeues\n", total, len(t.acked), len(t.dead), t.requeued)
	var counts []int
	for c := range t.redelivered {
		counts = append(counts, c)
	}
	sort.Ints(counts)
	fmt.Println("deliveries by redelivery count:")
	for _, c := range counts {
		fmt.Printf("  %d: %d\n", c, t.redelivered[c])
	}
	reasons := map[string]int{}
	for _, r := range t.dead {
		reasons[kindOf(r)]++
	}
	fmt.Println("dead letters by reason:")
	var keys []string
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %3d × %s\n", reasons[k], k)
	}
	for id, r := range t.dead {
		if t.acked[id] {
			return fmt.Errorf("message %s was both acked and dead-lettered (%s)", id, r)
		}
	}
	if len(t.acked)+len(t.dead) != total || s.SettleErrors != 0 || s.Conflicts != 0 {
		return fmt.Errorf("settlement incomplete: %d acked + %d dead-lettered of %d; stats %+v", len(t.acked), len(t.dead), total, s)
	}
	fmt.Println("every message ended acked or dead-lettered")
	return nil
}

// kindOf shortens a dead-letter reason to its kind for the summary.
func kindOf(reason string) string {
	switch {
	case strings.HasPrefix(reason, "decode"):
		return "malformed payload (decode error)"
	case strings.Contains(reason, "negative total"):
		return "invalid order (negative total)"
	case strings.Contains(reason, "retries exhausted"):
		return "retries exhausted: " + reason[strings.LastIndex(reason, ": ")+2:]
	}
	return reason
}
