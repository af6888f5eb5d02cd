package tck

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(5, "Poison_DeadLetteredOnlyAfterConfirmedPublish", always, casePoison)
	register(6, "TransientError_RedeliveredWithIncreasingCount", always, caseTransient)
	register(10, "Batch_SuccessAcksWholeBatch", always, caseBatch)
	register(11, "BoundedRetry_AttemptsWithinBoundThenDeadLetter", always, caseBoundedRetry)
	register(15, "Cancellation_NoSettlement_Conflict_Refused", always, caseCancelConflict)
}

// dlq consumes the kit topic's dead-letter topic.
func (k *kit) dlq(a ports.Adapter) *consumer {
	sp := k.spec()
	sp.Topic = ports.DeadLetterTopic(k.topic)
	sp.Group = k.group + "-dlq"
	return k.consume(a, sp, nil)
}

// 5. poison → dead-letter topic receives it; original settled only after
// the dead-letter publish was confirmed.
func casePoison(k *kit) {
	dead := k.dlq(k.first)
	c := k.consume(k.first, k.spec(), func(context.Context, *ports.Delivery) error {
		return ports.Poisonf("order total is negative")
	})
	id := k.send(k.first, 1)[0]
	if r := c.next("the poison message"); r.d.ID != id {
		k.t.Fatalf("got %s, want %s", r.d.ID, id)
	}
	r := dead.next("the dead-lettered copy")
	if r.d.ID != id {
		k.t.Fatalf("dead letter carries id %q, want %q", r.d.ID, id)
	}
	if reason := r.d.Headers.Get(ports.HeaderDeadLetterReason); !strings.Contains(reason, "order total is negative") {
		k.t.Fatalf("dead-letter reason %q does not carry the handler's error", reason)
	}
	if got := r.d.Headers.Get(ports.HeaderDeadLetterTopic); got != string(k.topic) {
		k.t.Fatalf("dead-letter topic header %q, want %q", got, k.topic)
	}
	if got := r.d.Headers.Get(ports.HeaderAttempts); got != "1" {
		k.t.Fatalf("attempts header %q, want 1 (poison burns no retries)", got)
	}
	c.waitStats("the dead-letter settlement", func(s flow.Stats) bool { return s.DeadLettered == 1 })
	c.quiet("a dead-lettered original must not come back")

	f, ok := k.h.(DeadLetterFaults)
	if !ok {
		k.t.Logf("harness has no DeadLetterFaults: failed dead-letter publish not exercised")
		return
	}
	f.FailDeadLetters(true)
	id2 := k.send(k.first, 1)[0]
	c.next("the second poison message")
	c.waitStats("the failed dead-letter settlement", func(s flow.Stats) bool { return s.SettleErrors >= 1 })
	dead.quiet("a failed dead-letter publish must not reach the dead-letter topic")
	f.FailDeadLetters(false)
	// The original is handed back while the consumer runs: it comes
	// back, and this time its dead-letter publish goes through.
	if r := dead.next("the dead letter of the original whose first dead-letter publish failed, redelivered to the running consumer"); r.d.ID != id2 {
		k.t.Fatalf("dead letter %s, want %s", r.d.ID, id2)
	}
	// Handing the original back (closing a channel or a connection where
	// the broker redelivers only then) is no fault: no lost connection is
	// reported (all reports are in once the consumer stopped).
	c.stop()
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, ports.ErrUnreachable) {
				k.t.Fatalf("a lost connection was reported, the broker being up all along: %v", err)
			}
		default:
			return
		}
	}
}

// 6. transient error → redelivered, redelivery count increases.
func caseTransient(k *kit) {
	c := k.consume(k.first, k.spec(), func(_ context.Context, d *ports.Delivery) error {
		if d.RedeliveryCount < 2 {
			return errors.New("database busy")
		}
		return nil
	})
	id := k.send(k.first, 1)[0]
	var counts []int
	for len(counts) == 0 || counts[len(counts)-1] < 2 {
		r := c.next("a delivery of the failing message")
		if r.d.ID != id {
			k.t.Fatalf("got %s, want %s", r.d.ID, id)
		}
		if n := len(counts); n > 0 && r.d.RedeliveryCount <= counts[n-1] {
			k.t.Fatalf("redelivery counts %v then %d: must increase", counts, r.d.RedeliveryCount)
		}
		counts = append(counts, r.d.RedeliveryCount)
		if len(counts) > 10 {
			k.t.Fatalf("redelivery counts %v never reached 2", counts)
		}
	}
	if k.caps.ExactRedeliveryCount && (len(counts) != 3 || counts[0] != 0 || counts[1] != 1) {
		k.t.Fatalf("redelivery counts %v, want exactly [0 1 2] (adapter declares exact counts)", counts)
	}
	c.waitStats("the final ack", func(s flow.Stats) bool { return s.Acked == 1 && s.Requeued == 2 })
	c.quiet("an acked message must not come back")
}

// 10. batch: the handler gets ≥1 message; success acks the whole batch (no
// redelivery after restart).
func caseBatch(k *kit) {
	const n, size = 23, 5
	sp := k.spec()
	sp.Batch = ports.BatchSpec{Size: size, Window: 100 * time.Millisecond}
	got := make(chan []*ports.Delivery, n)
	p := flow.New(k.first, sp, flow.WithDrainTimeout(0))
	flow.Sink(batches(p.Source(), size, sp.Batch.Window), func(_ context.Context, b []*ports.Delivery) error {
		got <- b
		return nil
	})
	if err := p.Start(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	sent := k.send(k.first, n)
	seen := map[string]int{}
	batchesSeen := 0
	for len(seen) < n {
		select {
		case b := <-got:
			if len(b) < 1 || len(b) > size {
				k.t.Fatalf("batch of %d, want 1..%d", len(b), size)
			}
			batchesSeen++
			for _, d := range b {
				seen[d.ID]++
			}
		case <-time.After(k.opts.Timeout):
			k.t.Fatalf("timed out: %d of %d messages arrived in batches", len(seen), n)
		}
	}
	deadline := time.Now().Add(k.opts.Timeout)
	for p.Stats().Acked < n {
		if time.Now().After(deadline) {
			k.t.Fatalf("batch acks: %+v, want %d acked", p.Stats(), n)
		}
		time.Sleep(2 * time.Millisecond) // polling a counter, bounded
	}
	if st := p.Stats(); st.SettleCalls > int64(batchesSeen) {
		k.t.Fatalf("%d batches were settled with %d Settle calls: each batch must be one call", batchesSeen, st.SettleCalls)
	}
	stopNow(k, p)
	for _, id := range sent {
		if seen[id] != 1 {
			k.t.Fatalf("message %s seen %d times in batches, want 1", id, seen[id])
		}
	}
	again := k.consume(k.adapter(), k.spec(), nil)
	again.quiet("an acked batch must not be redelivered after restart")
	k.t.Logf("%d messages in %d batches", n, batchesSeen)
}

// 11. bounded retry: attempts ≤ bound, then dead letter — never a silent drop.
func caseBoundedRetry(k *kit) {
	const bound = 3
	dead := k.dlq(k.first)
	sp := k.spec()
	sp.Retry.MaxAttempts = bound
	c := k.consume(k.first, sp, func(context.Context, *ports.Delivery) error { return errors.New("downstream unavailable") })
	id := k.send(k.first, 1)[0]
	for i := range bound {
		if r := c.next("attempt " + strconv.Itoa(i+1)); r.d.ID != id {
			k.t.Fatalf("got %s, want %s", r.d.ID, id)
		}
	}
	r := dead.next("the message after its retries were exhausted")
	if r.d.ID != id || r.d.Headers.Get(ports.HeaderAttempts) != strconv.Itoa(bound) {
		k.t.Fatalf("dead letter id %s attempts %q, want %s after %d", r.d.ID, r.d.Headers.Get(ports.HeaderAttempts), id, bound)
	}
	if reason := r.d.Headers.Get(ports.HeaderDeadLetterReason); !strings.Contains(reason, "downstream unavailable") {
		k.t.Fatalf("dead-letter reason %q does not carry the last error", reason)
	}
	c.quiet("no attempt beyond the bound")
}

// 15. cancellation → no settlement; a conflicting double settlement → a
// conflict error and no second settlement.
func caseCancelConflict(k *kit) {
	// Cancellation.
	p := flow.New(k.first, k.spec(), flow.WithDrainTimeout(0))
	cancelled := make(chan string, 1)
	out := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[struct{}]) {
		_ = it.Completion.Cancel(errors.New("caller gave up"))
		cancelled <- it.Msg.ID
	})
	flow.Sink(out, func(context.Context, struct{}) error { return nil })
	if err := p.Start(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	id := k.send(k.first, 1)[0]
	select {
	case got := <-cancelled:
		if got != id {
			k.t.Fatalf("cancelled %s, want %s", got, id)
		}
	case <-time.After(k.opts.Timeout):
		k.t.Fatal("the message to cancel never arrived")
	}
	stopNow(k, p)
	if s := p.Stats(); s.Acked+s.Requeued+s.DeadLettered != 0 || s.Cancelled != 1 {
		k.t.Fatalf("stats after cancellation %+v, want 1 cancelled and nothing settled", s)
	}

	// Conflict, on a fresh instance that first receives the cancelled message.
	var mu sync.Mutex
	var conflicts []error
	p2 := flow.New(k.adapter(), k.spec(), flow.WithDrainTimeout(0), flow.WithErrorHandler(func(error) {}))
	seen := make(chan string, 4)
	out2 := flow.Via(p2.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[struct{}]) {
		_ = it.Succeed()
		err := it.Fail(ports.Poisonf("changed my mind"))
		mu.Lock()
		conflicts = append(conflicts, err)
		mu.Unlock()
		seen <- it.Msg.ID
	})
	flow.Sink(out2, func(context.Context, struct{}) error { return nil })
	if err := p2.Start(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { stopNow(k, p2) })
	select {
	case got := <-seen:
		if got != id {
			k.t.Fatalf("after restart got %s, want the cancelled message %s again", got, id)
		}
	case <-time.After(k.opts.Timeout):
		k.t.Fatal("a cancelled (unsettled) message was not redelivered to the next consumer")
	}
	mu.Lock()
	err := conflicts[0]
	mu.Unlock()
	if !errors.Is(err, ports.ErrConflict) {
		k.t.Fatalf("second, conflicting outcome returned %v, want ErrConflict", err)
	}
	deadline := time.Now().Add(k.opts.Timeout)
	for p2.Stats().Acked < 1 {
		if time.Now().After(deadline) {
			k.t.Fatalf("first outcome not settled: %+v", p2.Stats())
		}
		time.Sleep(2 * time.Millisecond) // polling a counter, bounded
	}
	if s := p2.Stats(); s.DeadLettered != 0 || s.Conflicts != 1 {
		k.t.Fatalf("stats %+v: want 1 conflict and no dead letter", s)
	}
	select {
	case again := <-seen:
		k.t.Fatalf("message %s delivered again after its first outcome was settled", again)
	case <-time.After(k.opts.Quiet):
	}
}

// stopNow stops p, cancelling in-flight work at once.
func stopNow(k *kit, p *flow.Pipeline) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Stop(ctx); err != nil && !abandoned(err) {
		k.t.Errorf("stop: %v", err)
	}
}

// abandoned reports whether err is Stop saying that it cancelled in-flight
// work, which the cases that stop at once do on purpose.
func abandoned(err error) bool {
	var ae *flow.AbandonedError
	return errors.As(err, &ae)
}

// batches groups deliveries into batches of up to size, closed after
// window; a batch's one outcome settles every member (flow.Join).
func batches(in flow.Stream[*ports.Delivery], size int, window time.Duration) flow.Stream[[]*ports.Delivery] {
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[*ports.Delivery], out chan<- flow.Item[[]*ports.Delivery]) error {
		var held []flow.Item[*ports.Delivery]
		timer := time.NewTimer(window)
		timer.Stop()
		flush := func() {
			if len(held) == 0 {
				return
			}
			ds := make([]*ports.Delivery, len(held))
			cs := make([]*flow.Completion, len(held))
			for i, it := range held {
				ds[i], cs[i] = it.Value, it.Completion
			}
			out <- flow.Item[[]*ports.Delivery]{Ctx: ctx, Value: ds, Completion: flow.Join(cs...)}
			held = nil
		}
		for {
			select {
			case it, ok := <-src:
				if !ok {
					flush()
					return nil
				}
				held = append(held, it)
				if len(held) == 1 {
					timer.Reset(window)
				}
				if len(held) >= size {
					timer.Stop()
					flush()
				}
			case <-timer.C:
				flush()
			}
		}
	})
}
