package mem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func declare(t *testing.T, a *mem.Adapter, spec ports.TopicSpec) {
	t.Helper()
	if err := a.DeclareTopic(context.Background(), spec); err != nil {
		t.Fatalf("DeclareTopic(%+v): %v", spec, err)
	}
}

// Retention is measured from publish with the broker's clock; an expired
// message is dropped at receive and counted.
func TestRetentionDropsExpiredAtReceive(t *testing.T) {
	clk := newManualClock()
	b := newBroker(t, mem.WithClock(clk))
	a := newAdapter(t, b)
	declare(t, a, ports.TopicSpec{Topic: "t", Retention: time.Minute, Groups: []string{"g"}})
	send(t, a, "t", "old")
	clk.Advance(59 * time.Second)
	send(t, a, "t", "young")
	clk.Advance(time.Second) // "old" is now exactly a minute old
	s := subscribe(t, a, lb("t", "g"))
	if got := payloads(receive(t, s, 1)); got[0] != "young" {
		t.Fatalf("got %q, want young", got)
	}
	receiveBlocked(t, s)
	if q := queueStats(t, b, "t", "g"); q.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1", q.Dropped)
	}
}

func TestMaxLengthDropsTheOldest(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("t", "g")) // a queue that exists before the declaration gets the cap too
	declare(t, a, ports.TopicSpec{Topic: "t", MaxLength: 2})
	send(t, a, "t", "1", "2", "3")
	if got := payloads(receive(t, s, 2)); strings.Join(got, ",") != "2,3" {
		t.Fatalf("got %q, want 2,3", got)
	}
	if q := queueStats(t, b, "t", "g"); q.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1", q.Dropped)
	}
}

func TestDeclareTopicIsIdempotentAndRefusesADifferentRedeclaration(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	spec := ports.TopicSpec{Topic: "t", Retention: time.Hour, Groups: []string{"a", "b"}}
	declare(t, a, spec)
	declare(t, newAdapter(t, b), spec) // another process, same broker
	other := spec
	other.Groups = []string{"a"}
	err := a.DeclareTopic(context.Background(), other)
	var re *ports.RedeclareError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "Groups") {
		t.Fatalf("redeclare = %v, want a RedeclareError naming Groups", err)
	}
	if _, ok := b.Stats().Queue("", "t", "b", ""); !ok {
		t.Fatal("group b was removed by a refused redeclaration")
	}
	if err := a.DeclareTopic(context.Background(), ports.TopicSpec{Topic: "t", QoS: ports.ExactlyOnce}); !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("exactly-once = %v", err)
	}
}

// A new group at StartEarliest starts with the topic's history (bounded by
// WithHistory), consumed or not by the other groups; at StartLatest with
// nothing.
func TestStartEarliestReplaysTheBoundedHistory(t *testing.T) {
	b := newBroker(t, mem.WithHistory(2, 1<<20))
	a := newAdapter(t, b)
	keep := subscribe(t, a, lb("t", "keeper"))
	send(t, a, "t", "1", "2", "3")
	settle(t, keep, ack, receive(t, keep, 3)...)

	latest := subscribe(t, a, lb("t", "latest"))
	receiveBlocked(t, latest)

	sp := lb("t", "earliest")
	sp.Start = ports.StartEarliest
	s := subscribe(t, a, sp)
	ds := receive(t, s, 2)
	if got := payloads(ds); strings.Join(got, ",") != "2,3" {
		t.Fatalf("got %q, want the last 2 (history bound 2)", got)
	}
	receiveBlocked(t, s)
	settle(t, s, ack, ds...)

	// An existing group resumes: no replay on a later Subscribe.
	_ = s.Stop(context.Background())
	s = subscribe(t, a, sp)
	receiveBlocked(t, s)
}

func TestHistoryKeepsNoMessageAboveItsByteBound(t *testing.T) {
	b := newBroker(t, mem.WithHistory(10, 4))
	a := newAdapter(t, b)
	subscribe(t, a, lb("t", "keeper"))
	send(t, a, "t", "12345", "ab")
	sp := lb("t", "new")
	sp.Start = ports.StartEarliest
	s := subscribe(t, a, sp)
	if got := payloads(receive(t, s, 1)); got[0] != "ab" {
		t.Fatalf("got %q, want only the message within the 4-byte bound", got)
	}
	receiveBlocked(t, s)
}

func TestWithHistoryRefusesZero(t *testing.T) {
	if _, err := mem.NewBroker(mem.WithHistory(0, 1)); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("WithHistory(0, 1) = %v", err)
	}
}

func TestSingleActiveFailsOverAtStop(t *testing.T) {
	b := newBroker(t)
	a1, a2 := newAdapter(t, b), newAdapter(t, b)
	sp := lb("t", "g")
	sp.SingleActive = true
	s1 := subscribe(t, a1, sp)
	s2 := subscribe(t, a2, sp)
	send(t, a1, "t", "1", "2")
	got := receive(t, s1, 2) // s1 receives first, so it is the active one
	receiveBlocked(t, s2)
	settle(t, s1, ack, got[0])
	if err := s1.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := receive(t, s2, 1)[0] // the unsettled one, returned by Stop
	if string(d.Payload) != "2" || d.RedeliveryCount != 1 {
		t.Fatalf("standby got %q (redeliveries %d), want 2 redelivered once", d.Payload, d.RedeliveryCount)
	}

	mixed := lb("t", "g")
	if _, err := a1.Subscribe(context.Background(), mixed); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a competing consumer joining a single-active group = %v, want ErrInvalid", err)
	}
}

func TestBestEffortDropsInsteadOfWaitingAndIsNeverRequeued(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b, mem.WithMaxQueue(1))
	sp := lb("t", "g")
	sp.QoS = ports.BestEffort
	s := subscribe(t, a, sp)
	msgs := []ports.Message{{Topic: "t", Payload: []byte("1"), QoS: ports.BestEffort}, {Topic: "t", Payload: []byte("2"), QoS: ports.BestEffort}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := a.Send(ctx, msgs...); err != nil { // an at-least-once send would wait for room
		t.Fatalf("Send best effort to a full queue: %v", err)
	}
	ds := receive(t, s, 1)
	if string(ds[0].Payload) != "1" || ds[0].QoS != ports.BestEffort {
		t.Fatalf("got %q (%v)", ds[0].Payload, ds[0].QoS)
	}
	settle(t, s, requeue, ds...)
	receiveBlocked(t, s)
	if q := queueStats(t, b, "t", "g"); q.Dropped != 2 || q.Ready != 0 {
		t.Fatalf("stats %+v, want 2 dropped (one full, one requeued) and nothing ready", q)
	}
}

func TestBestEffortDeadLetterPublishesNothing(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	dlq := subscribe(t, a, lb("t.dlq", "g"))
	sp := lb("t", "g")
	sp.QoS = ports.BestEffort
	s := subscribe(t, a, sp)
	send(t, a, "t", "x")
	settle(t, s, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("bad")}, receive(t, s, 1)...)
	receiveBlocked(t, dlq)
}

func TestTopicQoSAppliesToDefaultMessages(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	declare(t, a, ports.TopicSpec{Topic: "t", QoS: ports.BestEffort, Groups: []string{"g"}})
	send(t, a, "t", "x")
	s := subscribe(t, a, lb("t", "g"))
	if d := receive(t, s, 1)[0]; d.QoS != ports.BestEffort {
		t.Fatalf("delivery QoS %v, want the topic's best-effort", d.QoS)
	}
}

func TestOversizedSendIsRefusedBeforeStoring(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("t", "g"))
	err := a.Send(context.Background(), ports.Message{Topic: "t", Payload: make([]byte, mem.MaxMessageBytes+1)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrUnconfirmed) || se.Limit != mem.MaxMessageBytes {
		t.Fatalf("oversized Send = %v", err)
	}
	receiveBlocked(t, s)
}

func TestScopedTopicsAreDistinct(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	ta := ports.Scope{Tenant: "a", Namespace: "ns"}.Topic("orders")
	tb := ports.Scope{Tenant: "b", Namespace: "ns"}.Topic("orders")
	sa, sb := subscribe(t, a, lb(string(ta), "g")), subscribe(t, a, lb(string(tb), "g"))
	send(t, a, string(ta), "for a")
	if d := receive(t, sa, 1)[0]; d.Topic != ta || string(d.Payload) != "for a" {
		t.Fatalf("got %q on %q", d.Payload, d.Topic)
	}
	receiveBlocked(t, sb)
}

func TestWithExistingAdoptsAndNeverCreates(t *testing.T) {
	b := newBroker(t)
	legacy := newAdapter(t, b)
	if err := legacy.DeclareGroup(context.Background(), "legacy.orders", "mailer"); err != nil {
		t.Fatal(err)
	}
	a := newAdapter(t, b, mem.WithExisting(mem.Existing{Topic: "orders", As: "legacy.orders", Groups: map[string]string{"mail": "mailer", "gone": "nope"}}))
	s := subscribe(t, a, lb("orders", "mail"))
	send(t, legacy, "legacy.orders", "from the old program")
	send(t, a, "orders", "from sluice")
	ds := receive(t, s, 2)
	for _, d := range ds {
		if d.Topic != "orders" {
			t.Fatalf("delivery topic %q, want the logical orders", d.Topic)
		}
	}
	if got := sorted(payloads(ds)); got[0] != "from sluice" || got[1] != "from the old program" {
		t.Fatalf("payloads %q", got)
	}
	if _, err := a.Subscribe(context.Background(), lb("orders", "gone")); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Subscribe to a missing adopted queue = %v", err)
	}
	if err := a.DeclareGroup(context.Background(), "orders", "gone"); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("DeclareGroup of a missing adopted queue = %v", err)
	}
	if err := a.DeclareTopic(context.Background(), ports.TopicSpec{Topic: "orders", Groups: []string{"mail"}}); err != nil {
		t.Fatalf("DeclareTopic matching the existing topology = %v", err)
	}
	var re *ports.RedeclareError
	if err := a.DeclareTopic(context.Background(), ports.TopicSpec{Topic: "orders", Retention: time.Hour}); !errors.As(err, &re) || !strings.Contains(re.Name, "legacy.orders") {
		t.Fatalf("DeclareTopic changing the existing topic = %v, want a RedeclareError naming legacy.orders", err)
	}
	if n := len(b.Stats().Queues); n != 1 {
		t.Fatalf("%d queues, want only the existing one: %+v", n, b.Stats().Queues)
	}
}

func TestWithExistingValidates(t *testing.T) {
	b := newBroker(t)
	for _, e := range [][]mem.Existing{
		{{Topic: "orders", As: ""}},
		{{Topic: "bad topic", As: "x"}},
		{{Topic: "orders", As: "x", Groups: map[string]string{"g": ""}}},
		{{Topic: "orders", As: "x"}, {Topic: "orders", As: "y"}},
	} {
		if _, err := mem.New(b, mem.WithExisting(e...)); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("WithExisting(%+v) = %v, want ErrInvalid", e, err)
		}
	}
}
