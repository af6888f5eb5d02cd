package amqp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
)

// rawChannel opens a channel of a connection of its own on the shared
// node, closed at the end of t.
func rawChannel(t *testing.T) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(rabbittest.Shared(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// queueArgs returns rabbitmqctl's view of queue's arguments and
// durability ("" when the queue does not exist).
func queueArgs(t *testing.T, queue string) string {
	t.Helper()
	out, err := rabbittest.Shared(t).Ctl(testCtx(t), "list_queues", "-q", "--no-table-headers", "name", "durable", "arguments")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.SplitN(line, "\t", 2); len(f) == 2 && f[0] == queue {
			return f[1]
		}
	}
	return ""
}

// TestDeclareTopicMapsRetentionAndLength: DeclareTopic declares each group
// queue with x-message-ttl and x-max-length, keeps what is sent before the
// first consumer (the oldest dropped beyond MaxLength), and a Subscribe of
// a group not declared ahead gets the same arguments.
func TestDeclareTopicMapsRetentionAndLength(t *testing.T) {
	ns := namespace("ret")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	spec := ports.TopicSpec{Topic: "state", Retention: 30 * time.Second, MaxLength: 2, Groups: []string{"early"}}
	if err := ports.DeclareTopic(testCtx(t), a, spec); err != nil {
		t.Fatalf("DeclareTopic: %v", err)
	}
	if err := ports.DeclareTopic(testCtx(t), a, spec); err != nil {
		t.Fatalf("DeclareTopic again (same spec): %v", err)
	}
	q := ns + "/state/lb/early"
	got := queueArgs(t, q)
	for _, want := range []string{`"x-message-ttl",30000`, `"x-max-length",2`, `"x-queue-type","quorum"`} {
		if !strings.Contains(got, want) {
			t.Fatalf("queue %s arguments %s lack %s", q, got, want)
		}
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		send(t, a, "state", id)
	}
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "state", Group: "early", InFlight: 10})
	for _, want := range []string{"m2", "m3"} { // m1 was dropped by x-max-length
		if d := receive1(t, s); d.ID != want {
			t.Fatalf("received %q, want %q (x-max-length 2 keeps the newest two)", d.ID, want)
		}
	}
	_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "state", Group: "late"})
	if got := queueArgs(t, ns+"/state/lb/late"); !strings.Contains(got, `"x-message-ttl",30000`) {
		t.Fatalf("a group subscribed after DeclareTopic lacks the topic's retention: %s", got)
	}
	other := spec
	other.Retention = time.Minute
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(testCtx(t), a, other); !errors.As(err, &re) || !strings.Contains(err.Error(), "Retention") {
		t.Fatalf("DeclareTopic with another retention returned %v, want a RedeclareError naming Retention", err)
	}
}

// TestRedeclareNamesTheDifferenceAndLeavesTheQueue: a group queue that
// exists with another type and TTL is refused with a RedeclareError naming
// the argument RabbitMQ reports first, and rabbitmqctl shows the queue
// unchanged.
func TestRedeclareNamesTheDifferenceAndLeavesTheQueue(t *testing.T) {
	ns := namespace("redecl")
	q := ns + "/inv/lb/g"
	ch := rawChannel(t)
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-queue-type": "classic", "x-message-ttl": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	before := queueArgs(t, q)
	a := newAdapter(t, amqp.Options{Namespace: ns})
	err := ports.DeclareTopic(testCtx(t), a, ports.TopicSpec{Topic: "inv", Retention: 5 * time.Second, Groups: []string{"g"}})
	var re *ports.RedeclareError
	if !errors.As(err, &re) || !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("DeclareTopic over a classic queue returned %v, want a *ports.RedeclareError", err)
	}
	t.Logf("refusal: %v", err)
	if len(re.Diffs) != 1 || re.Diffs[0] != "x-queue-type: existing 'classic', declared 'quorum'" &&
		re.Diffs[0] != "x-message-ttl: existing '1000', declared '5000'" {
		t.Fatalf("RedeclareError diffs %q, want the queue type or the TTL with both values", re.Diffs)
	}
	if _, err := a.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "inv", Group: "g"}); !errors.As(err, &re) {
		t.Fatalf("Subscribe over the classic queue returned %v, want a RedeclareError", err)
	}
	if after := queueArgs(t, q); after != before {
		t.Fatalf("queue %s changed: before %s, after %s", q, before, after)
	}
}

// TestStartEarliestRefused: RabbitMQ has no history for a new queue.
func TestStartEarliestRefused(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	if a.Capabilities().StartEarliest {
		t.Fatal("StartEarliest declared")
	}
	_, err := a.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "e", Group: "g", Start: ports.StartEarliest})
	if !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("StartEarliest returned %v, want ErrUnsupported", err)
	}
}

// TestSingleActiveFailover: with x-single-active-consumer only the first
// subscriber receives; when it stops, the standing-by one takes over.
func TestSingleActiveFailover(t *testing.T) {
	ns := namespace("sac")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	spec := ports.SubscriptionSpec{Topic: "sac", Group: "g", SingleActive: true, InFlight: 10}
	first, err := a.Subscribe(testCtx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	second := subscribe(t, a, spec)
	if got := queueArgs(t, ns+"/sac/lb/g"); !strings.Contains(got, `"x-single-active-consumer",true`) {
		t.Fatalf("queue arguments %s lack x-single-active-consumer", got)
	}
	send(t, a, "sac", "a1")
	d := receive1(t, first)
	if err := first.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	send(t, a, "sac", "a2")
	if d := receive1(t, first); d.ID != "a2" {
		t.Fatalf("active consumer got %q", d.ID)
	}
	// a2 is unsettled: stopping the active consumer hands it back and the
	// standing-by one becomes active and receives it.
	if err := first.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if d := receive1(t, second); d.ID != "a2" {
		t.Fatalf("standby got %q after failover, want a2", d.ID)
	}
}

// TestBestEffortQueueAndMessages: a best-effort group consumes a
// non-durable classic queue, messages are transient, and a requeue drops.
func TestBestEffortQueueAndMessages(t *testing.T) {
	ns := namespace("q0")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "ticks", Group: "g", QoS: ports.BestEffort})
	got := queueArgs(t, ns+"/ticks/q0/g")
	if !strings.HasPrefix(got, "false") || !strings.Contains(got, `"x-queue-type","classic"`) {
		t.Fatalf("best-effort queue: %q, want non-durable classic", got)
	}
	if err := a.Send(testCtx(t), ports.Message{Topic: "ticks", Payload: []byte("1"), QoS: ports.BestEffort, Headers: ports.NewHeaders(ports.HeaderID, "t1")}); err != nil {
		t.Fatal(err)
	}
	d := receive1(t, s)
	if err := s.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	send(t, a, "ticks", "t2")
	if d := receive1(t, s); d.ID != "t2" {
		t.Fatalf("after a best-effort requeue got %q, want t2 (the requeued one is dropped)", d.ID)
	}
}

// TestScopedTopicsNeverShareAQueue: the same name in two tenants routes
// to two queues.
func TestScopedTopicsNeverShareAQueue(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	t1 := ports.Scope{Tenant: "acme", Namespace: "prod"}.Topic("orders")
	t2 := ports.Scope{Tenant: "umbrella", Namespace: "prod"}.Topic("orders")
	s1 := subscribe(t, a, ports.SubscriptionSpec{Topic: t1, Group: "g"})
	s2 := subscribe(t, a, ports.SubscriptionSpec{Topic: t2, Group: "g"})
	send(t, a, t1, "for-acme")
	send(t, a, t2, "for-umbrella")
	if d := receive1(t, s1); d.ID != "for-acme" {
		t.Fatalf("acme got %q", d.ID)
	}
	if d := receive1(t, s2); d.ID != "for-umbrella" {
		t.Fatalf("umbrella got %q", d.ID)
	}
}

// TestOversizedPayloadRefusedBeforeTheBroker: a payload above
// MaxMessageBytes fails with a SizeError (ErrInvalid, not unconfirmed) and
// nothing is published.
func TestOversizedPayloadRefusedBeforeTheBroker(t *testing.T) {
	a := newAdapter(t, amqp.Options{MaxMessageBytes: 1024})
	if got := a.Capabilities().MaxMessageBytes; got != 1024 {
		t.Fatalf("MaxMessageBytes %d", got)
	}
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "big", Group: "g"})
	err := a.Send(testCtx(t), ports.Message{Topic: "big", Payload: make([]byte, 1025)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("oversized Send returned %v, want a SizeError", err)
	}
	if err := a.Send(testCtx(t), ports.Message{Topic: "big", Payload: make([]byte, 1024), Headers: ports.NewHeaders(ports.HeaderID, "fits")}); err != nil {
		t.Fatalf("Send at the limit: %v", err)
	}
	if d := receive1(t, s); d.ID != "fits" {
		t.Fatalf("got %q: the oversized message reached the broker", d.ID)
	}
	if _, err := amqp.New(context.Background(), amqp.Options{URL: rabbittest.Shared(t).URL, MaxMessageBytes: 600 << 20}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("MaxMessageBytes above 512 MiB: %v", err)
	}
}

// TestOtherProcessUsesADeclaredQueueAsItIs: a second adapter (another
// process) that did not declare the topic subscribes to and declares the
// group whose queue has the topic's TTL, using it as it is; declaring the
// topic with another retention is refused and the queue unchanged.
func TestOtherProcessUsesADeclaredQueueAsItIs(t *testing.T) {
	ns := namespace("other")
	a := newAdapter(t, amqp.Options{Namespace: ns})
	if err := ports.DeclareTopic(testCtx(t), a, ports.TopicSpec{Topic: "ev", Retention: time.Minute, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	q := ns + "/ev/lb/g"
	before := queueArgs(t, q)
	b := newAdapter(t, amqp.Options{Namespace: ns})
	if err := ports.DeclareGroup(testCtx(t), b, "ev", "g"); err != nil {
		t.Fatalf("DeclareGroup by another adapter: %v", err)
	}
	s := subscribe(t, b, ports.SubscriptionSpec{Topic: "ev", Group: "g"})
	send(t, a, "ev", "e1")
	if d := receive1(t, s); d.ID != "e1" {
		t.Fatalf("got %q", d.ID)
	}
	var re *ports.RedeclareError
	err := ports.DeclareTopic(testCtx(t), b, ports.TopicSpec{Topic: "ev", Retention: 2 * time.Minute, Groups: []string{"g"}})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "x-message-ttl: existing '60000', declared '120000'") {
		t.Fatalf("DeclareTopic with another retention by another adapter: %v", err)
	}
	if after := queueArgs(t, q); after != before {
		t.Fatalf("queue changed: %s → %s", before, after)
	}
}
