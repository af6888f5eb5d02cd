package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func subscribe(t *testing.T, a *amqp.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	t.Helper()
	s, err := a.Subscribe(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func receive1(t *testing.T, s ports.Subscription) *ports.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds, err := s.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ds[0]
}

func send(t *testing.T, a *amqp.Adapter, topic ports.Topic, id string) {
	t.Helper()
	if err := a.Send(testCtx(t), ports.Message{Topic: topic, Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// TestSettleRules: a second settlement of a delivery is refused and
// settles nothing; Settle and Receive after Stop return ErrClosed; Stop is
// idempotent.
func TestSettleRules(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	s, err := a.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "rules", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, "rules", "r1")
	send(t, a, "rules", "r2")
	d1, d2 := receive1(t, s), receive1(t, s)
	if err := s.Settle(testCtx(t), []*ports.Delivery{d1}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	err = s.Settle(testCtx(t), []*ports.Delivery{d1}, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("again")})
	if !errors.Is(err, portable.ErrAlreadySettled) || !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("second settlement returned %v, want ErrAlreadySettled (a conflict)", err)
	}
	if err := s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(testCtx(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := s.Settle(testCtx(t), []*ports.Delivery{d2}, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle after Stop returned %v, want ErrClosed", err)
	}
	if _, err := s.Receive(testCtx(t), 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Stop returned %v, want ErrClosed", err)
	}
	if _, ok := <-s.Errors(); ok {
		t.Fatal("Errors not closed after Stop")
	}
	// d2 was not settled: it comes back; d1 was acked: it does not.
	s2 := subscribe(t, a, ports.SubscriptionSpec{Topic: "rules", Group: "g"})
	if d := receive1(t, s2); d.ID != "r2" || d.RedeliveryCount != 1 {
		t.Fatalf("after stop got %s with count %d, want r2 with count 1 (quorum queues count the return)", d.ID, d.RedeliveryCount)
	}
}

// TestRedeliveryCountAcrossReturnsAndRequeues mixes the two ways a message
// comes back — a consumer stopping without settling (counted by the
// quorum queue's x-delivery-count, or the classic queue's redelivered
// flag) and a requeue (counted in the sluice-redelivery-count header) —
// and checks the count after each.
func TestRedeliveryCountAcrossReturnsAndRequeues(t *testing.T) {
	for _, qt := range []amqp.QueueType{amqp.Quorum, amqp.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			a := newAdapter(t, amqp.Options{QueueType: qt})
			spec := ports.SubscriptionSpec{Topic: "count", Group: "g", InFlight: 1}
			declare, err := a.Subscribe(testCtx(t), spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := declare.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			send(t, a, "count", "c1")
			var counts []int
			next := func(s ports.Subscription) *ports.Delivery {
				d := receive1(t, s)
				counts = append(counts, d.RedeliveryCount)
				return d
			}
			requeue := func(s ports.Subscription, d *ports.Delivery) {
				if err := s.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue, Reason: errors.New("busy")}); err != nil {
					t.Fatal(err)
				}
			}
			s1, _ := a.Subscribe(testCtx(t), spec)
			next(s1)
			_ = s1.Stop(testCtx(t)) // return 1
			s2, _ := a.Subscribe(testCtx(t), spec)
			requeue(s2, next(s2)) // requeue 1
			next(s2)
			_ = s2.Stop(testCtx(t)) // return 2
			s3, _ := a.Subscribe(testCtx(t), spec)
			requeue(s3, next(s3)) // requeue 2
			d := next(s3)
			if err := s3.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			_ = s3.Stop(testCtx(t))
			if fmt.Sprint(counts) != "[0 1 2 3 4]" {
				t.Fatalf("%s queue: counts %v, want [0 1 2 3 4]", qt, counts)
			}
		})
	}
}

// TestRequeueDelayHonoured: a requeue with a backoff is not redelivered
// before the backoff passed.
func TestRequeueDelayHonoured(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "backoff", Group: "g"})
	send(t, a, "backoff", "b1")
	d := receive1(t, s)
	const delay = 300 * time.Millisecond
	start := time.Now()
	if err := s.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue, Delay: delay}); err != nil {
		t.Fatal(err)
	}
	again := receive1(t, s)
	if el := time.Since(start); el < delay || again.ID != "b1" || again.RedeliveryCount != 1 {
		t.Fatalf("redelivered %s (count %d) after %v, want b1 (count 1) after at least %v", again.ID, again.RedeliveryCount, el, delay)
	}
	if err := s.Settle(testCtx(t), []*ports.Delivery{again}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// rawPublish publishes to the namespace's topic exchange as a foreign
// publisher would.
func rawPublish(t *testing.T, ns string, topic ports.Topic, p amqp091.Publishing) {
	t.Helper()
	conn, err := amqp091.Dial(rabbittest.Shared(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(ns+".topics", string(topic), true, false, p)
	if err != nil || !dc.Wait() {
		t.Fatalf("raw publish: %v", err)
	}
}

// TestMalformedCountIsPoison: a message whose redelivery count cannot be
// read is handed over with Delivery.Err (a poison HeaderError); the core
// then dead-letters it without running the handler, and the dead letter
// is readable (its count header is dropped).
func TestMalformedCountIsPoison(t *testing.T) {
	ns := namespace("bad")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	declare := subscribe(t, a, ports.SubscriptionSpec{Topic: "bad", Group: "g"})
	if err := declare.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	rawPublish(t, ns, "bad", amqp091.Publishing{Body: []byte("x"), Headers: amqp091.Table{
		ports.HeaderID: "bad-1", ports.HeaderRedeliveryCount: "three",
	}})
	send(t, a, "bad", "good-1")

	// At the SPI: the delivery carries the error.
	s, err := a.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "bad", Group: "g", InFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]error{}
	for len(got) < 2 {
		d := receive1(t, s)
		got[d.ID] = d.Err
	}
	var he *ports.HeaderError
	if !errors.As(got["bad-1"], &he) || !ports.IsPoison(got["bad-1"]) || got["good-1"] != nil {
		t.Fatalf("delivery errors %v: want a poison HeaderError on bad-1 only", got)
	}
	if err := s.Stop(testCtx(t)); err != nil { // both go back, unsettled
		t.Fatal(err)
	}

	// Through the core: bad-1 is dead-lettered unhandled, good-1 handled.
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("bad"), Group: "g"})
	handled := make(chan string, 4)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "bad", Group: "g"}, flow.WithDrainTimeout(0), flow.WithErrorHandler(func(error) {}))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		handled <- d.ID
		return nil
	})
	if err := p.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer stop(t, p)
	if id := <-handled; id != "good-1" {
		t.Fatalf("the handler got %s", id)
	}
	d := receive1(t, dlq)
	if d.ID != "bad-1" || !strings.Contains(d.Headers.Get(ports.HeaderDeadLetterReason), "malformed header "+ports.HeaderRedeliveryCount) || d.Err != nil {
		t.Fatalf("dead letter %s reason %q err %v", d.ID, d.Headers.Get(ports.HeaderDeadLetterReason), d.Err)
	}
}

// TestForeignHeadersDelivered: typed headers and broker headers from a
// foreign publisher are delivered, rendered as text or kept as facts.
func TestForeignHeadersDelivered(t *testing.T) {
	ns := namespace("foreign")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "foreign", Group: "g"})
	rawPublish(t, ns, "foreign", amqp091.Publishing{Body: []byte("x"), MessageId: "f-1", Headers: amqp091.Table{
		"count": int32(7), "ok": true,
		"x-death": []any{amqp091.Table{"count": int64(1), "reason": "rejected", "queue": "q"}},
	}})
	d := receive1(t, s)
	if d.ID != "f-1" || d.Headers.Get("count") != "7" || d.Headers.Get("ok") != "true" || d.Facts.Get("x-death") == "" {
		t.Fatalf("delivery id %q headers %v facts %v", d.ID, d.Headers, d.Facts)
	}
}

// TestBroadcastQueueLifetime: without InstanceTTL the instance's queue is
// deleted by Stop; with it, the queue outlives Stop (and the broker
// expires it).
func TestBroadcastQueueLifetime(t *testing.T) {
	ns := namespace("bc")
	a := newAdapter(t, amqp.Options{Namespace: ns, QueueType: amqp.Classic})
	conn, err := amqp091.Dial(rabbittest.Shared(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exists := func(q string) bool {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}
	for _, ttl := range []time.Duration{0, time.Minute} {
		spec := ports.SubscriptionSpec{Topic: "bc", Mode: ports.Broadcast, Group: "g", Instance: fmt.Sprint("i", int(ttl.Seconds())), InstanceTTL: ttl}
		s, err := a.Subscribe(testCtx(t), spec)
		if err != nil {
			t.Fatal(err)
		}
		q := fmt.Sprintf("%s/bc/bc/g/%s", ns, spec.Instance)
		if !exists(q) {
			t.Fatalf("queue %s not declared", q)
		}
		if err := s.Stop(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got := exists(q); got != (ttl > 0) {
			t.Fatalf("TTL %v: queue exists after Stop = %v", ttl, got)
		}
	}
}

// TestOptionsValidated: bad options fail New with ErrInvalid.
func TestOptionsValidated(t *testing.T) {
	for _, o := range []amqp.Options{
		{URL: "http://127.0.0.1/"},
		{URL: "amqp://127.0.0.1/", Namespace: "has space"},
		{URL: "amqp://127.0.0.1/", QueueType: "stream"},
		{URL: "amqp://127.0.0.1/", DelayGranularity: 2},
		{URL: "amqp://127.0.0.1/", Existing: &amqp.Existing{Topics: map[ports.Topic]amqp.ExistingTopic{"t": {RoutingKey: "k"}}}},
		{URL: "amqp://127.0.0.1/", Existing: &amqp.Existing{Groups: map[amqp.ExistingGroup]string{{Topic: "t"}: "q"}}},
	} {
		if _, err := amqp.New(context.Background(), o); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("New(%+v) returned %v, want ErrInvalid", o, err)
		}
	}
}

// TestSendUnroutableFails: a Send to a topic that no queue is bound for
// fails with ports.ErrNoSubscriber (the broker's basic.return), as on mem,
// and only that message of the call fails; with DropUnroutable the broker
// confirms and drops it.
func TestSendUnroutableFails(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "somebody", Group: "g"})
	err := a.Send(testCtx(t),
		ports.Message{Topic: "somebody", Payload: []byte("{}")},
		ports.Message{Topic: "nobody", Payload: []byte("{}")},
		ports.Message{Topic: "somebody", Payload: []byte("{}")})
	se := ports.SendErrors(err)
	if len(se) != 1 || se[0].Index != 1 || !errors.Is(err, ports.ErrNoSubscriber) || !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send with an unroutable second message returned %v, want one SendError (index 1) that is ErrNoSubscriber and ErrUnconfirmed", err)
	}
	lax := newAdapter(t, amqp.Options{DropUnroutable: true})
	if err := lax.Send(testCtx(t), ports.Message{Topic: "nobody", Payload: []byte("{}")}); err != nil {
		t.Fatalf("Send with DropUnroutable to a topic without subscriptions: %v", err)
	}
}

// TestSubscribeConflictingQueue: a queue that exists with other arguments
// (another queue type) is refused with ErrInvalid.
func TestSubscribeConflictingQueue(t *testing.T) {
	ns := namespace("conflict")
	classic := newAdapter(t, amqp.Options{Namespace: ns, QueueType: amqp.Classic})
	_ = subscribe(t, classic, ports.SubscriptionSpec{Topic: "c", Group: "g"})
	quorum := newAdapter(t, amqp.Options{Namespace: ns, QueueType: amqp.Quorum})
	if _, err := quorum.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "c", Group: "g"}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Subscribe over a classic queue with quorum returned %v, want ErrInvalid", err)
	}
}

// TestManyOutstandingConfirms: one Send of many messages keeps them all
// outstanding at once and returns when every confirm arrived.
func TestManyOutstandingConfirms(t *testing.T) {
	a := newAdapter(t, amqp.Options{MaxOutstanding: 256})
	_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "many", Group: "g"})
	msgs := make([]ports.Message, 3000)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "many", Payload: []byte(`{}`)}
	}
	start := time.Now()
	if err := a.Send(testCtx(t), msgs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("3000 confirmed publishes in one Send: %v", time.Since(start))
}

// TestConsecutiveReturns: after two consumers in a row stopped without
// settling, a quorum queue counts 2 (exact, as declared); a classic queue
// only knows "redelivered", so its count is 1 — a lower bound, which is
// why the adapter declares ExactRedeliveryCount only for quorum queues.
func TestConsecutiveReturns(t *testing.T) {
	for qt, want := range map[amqp.QueueType]int{amqp.Quorum: 2, amqp.Classic: 1} {
		t.Run(string(qt), func(t *testing.T) {
			a := newAdapter(t, amqp.Options{QueueType: qt})
			if got := a.Capabilities().ExactRedeliveryCount; got != (qt == amqp.Quorum) {
				t.Fatalf("ExactRedeliveryCount %v on %s queues", got, qt)
			}
			spec := ports.SubscriptionSpec{Topic: "returns", Group: "g", InFlight: 1}
			s0 := subscribe(t, a, spec)
			send(t, a, "returns", "r")
			for range 2 {
				receive1(t, s0)
				_ = s0.Stop(testCtx(t))
				s0, _ = a.Subscribe(testCtx(t), spec)
			}
			d := receive1(t, s0)
			_ = s0.Stop(testCtx(t))
			if d.RedeliveryCount != want {
				t.Fatalf("%s: count %d after two returns, want %d", qt, d.RedeliveryCount, want)
			}
		})
	}
}

// TestQueueDeletedUnderConsumer: when the broker cancels the consumer
// (its queue was deleted), a running Receive reports it on Errors,
// declares the queue again (after ReconnectBackoff) and goes on
// receiving. Messages published while the queue did not exist are gone
// with it.
func TestQueueDeletedUnderConsumer(t *testing.T) {
	ns := namespace("cancel")
	a := newAdapter(t, amqp.Options{Namespace: ns, ReconnectBackoff: 20 * time.Millisecond})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "c", Group: "g"})
	conn, err := amqp091.Dial(rabbittest.Shared(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	got := receiveAsync(s)
	if _, err := ch.QueueDelete(ns+"/c/lb/g", false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.Errors():
		if !strings.Contains(err.Error(), "cancelled by the broker") {
			t.Fatalf("reported %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broker's cancel was not reported")
	}
	// The queue comes back: a message sent once it is bound again (the
	// strict adapter reports NO_ROUTE until then) arrives.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.Send(testCtx(t), ports.Message{Topic: "c", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "after")})
		if err == nil {
			break
		}
		if !errors.Is(err, ports.ErrNoSubscriber) || time.Now().After(deadline) {
			t.Fatalf("Send while the queue comes back: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling the broker, bounded
	}
	if d := <-got; d.ID != "after" {
		t.Fatalf("got %s", d.ID)
	}
}

// TestZeroAdapterCapabilities: the zero Adapter reports the default
// (quorum) capabilities, for capability tables built without a broker.
func TestZeroAdapterCapabilities(t *testing.T) {
	c := amqp.Capabilities()
	if !c.ExactRedeliveryCount || !c.PublisherConfirm || !c.DelayedMessage || c.NativeDeadLetter || c.NativeBatch {
		t.Fatalf("zero adapter capabilities %v", c)
	}
}

// TestNewFailsWithinDialTimeoutNamingTheAddress: nothing listens on the
// port, so New fails at once with ports.ErrRefused and an error that names
// the address without the password and says what to check.
func TestNewFailsWithinDialTimeoutNamingTheAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = amqp.New(ctx, amqp.Options{URL: "amqp://u:s3cret@" + addr + "/", DialTimeout: 2 * time.Second})
	var de *kit.DialError
	if !errors.As(err, &de) || !errors.Is(err, ports.ErrRefused) {
		t.Fatalf("New = %v, want a *kit.DialError that is ports.ErrRefused", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, addr) || !strings.Contains(msg, "check") || strings.Contains(msg, "s3cret") {
		t.Fatalf("error %q must name %s, say what to check and hide the password", msg, addr)
	}
}
