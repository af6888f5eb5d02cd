package mem_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestDelayedMessageManualClock(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	if err := a.Send(context.Background(),
		ports.Message{Topic: "orders", Payload: []byte("late"), Delay: 5 * time.Second},
		ports.Message{Topic: "orders", Payload: []byte("now")},
	); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.DelayedMessages != 1 {
		t.Fatalf("DelayedMessages = %d, want 1", st.DelayedMessages)
	}
	if got := payloads(receive(t, s, 1)); got[0] != "now" {
		t.Fatalf("got %v", got)
	}
	clock.Advance(5*time.Second - time.Nanosecond)
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("delayed message ready before its deadline: %+v", q)
	}
	clock.Advance(time.Nanosecond)
	if got := payloads(receive(t, s, 1)); got[0] != "late" {
		t.Fatalf("got %v", got)
	}
	if st := b.Stats(); st.DelayedMessages != 0 || st.Scheduled != 0 {
		t.Fatalf("scheduler not empty: %+v", st)
	}
}

func TestDelayedMessageWallClock(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	const delay = 50 * time.Millisecond
	start := time.Now()
	if err := a.Send(context.Background(), ports.Message{Topic: "orders", Delay: delay}); err != nil {
		t.Fatal(err)
	}
	receive(t, s, 1)
	if el := time.Since(start); el < delay {
		t.Fatalf("delivered after %v, before the %v delay", el, delay)
	}
}

func TestDelayedMessagesAreRoutedWhenDue(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	// A delayed send, like any other, needs a queue bound to its topic:
	// the group is declared ahead and its first consumer starts during
	// the delay.
	if err := ports.DeclareGroup(context.Background(), a, "orders", "g"); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(context.Background(), ports.Message{Topic: "orders", Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, a, lb("orders", "g"))
	clock.Advance(time.Second)
	receive(t, s, 1)
}

// TestSchedulerManyPending holds 100k delayed messages, releases them in
// deadline order (ties in send order), then proves that Close drops what
// is still pending without delivering it.
func TestSchedulerManyPending(t *testing.T) {
	const n = 100_000
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	spec := lb("orders", "g")
	spec.InFlight = n
	s := subscribe(t, a, spec)

	rng := rand.New(rand.NewPCG(1, 2))
	msgs := make([]ports.Message, n)
	delays := make([]time.Duration, n)
	for i := range msgs {
		delays[i] = time.Duration(rng.IntN(1000)) * time.Millisecond
		msgs[i] = ports.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i)), Delay: delays[i] + time.Millisecond}
	}
	start := time.Now()
	if err := a.Send(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduled %d delayed messages in %v", n, time.Since(start))
	if st := b.Stats(); st.DelayedMessages != n {
		t.Fatalf("DelayedMessages = %d, want %d", st.DelayedMessages, n)
	}

	clock.Advance(500 * time.Millisecond)
	ready := queueStats(t, b, "orders", "g").Ready
	ds := receive(t, s, ready)
	prev := -1
	for _, d := range ds {
		i, _ := strconv.Atoi(string(d.Payload))
		if delays[i] >= 500*time.Millisecond {
			t.Fatalf("message %d (delay %v) released at 500ms", i, delays[i]+time.Millisecond)
		}
		if prev >= 0 && (delays[i] < delays[prev] || delays[i] == delays[prev] && i < prev) {
			t.Fatalf("message %d (delay %v) released after %d (delay %v)", i, delays[i], prev, delays[prev])
		}
		prev = i
	}
	if ready == 0 || ready == n {
		t.Fatalf("%d of %d released at half time", ready, n)
	}
	settle(t, s, ack, ds...)

	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Scheduled != 0 || len(st.Queues) != 0 {
		t.Fatalf("after Close: %d scheduled, %d queues", st.Scheduled, len(st.Queues))
	}
	clock.Advance(time.Hour) // nothing fires after Close
}

func TestSchedulerOrderEqualDeadlines(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	var msgs []ports.Message
	for i := range 20 {
		msgs = append(msgs, ports.Message{Topic: "orders", Payload: []byte(strconv.Itoa(i)), Delay: time.Second})
	}
	if err := a.Send(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	got := payloads(receive(t, s, 20))
	want := make([]string, 20)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("equal deadlines released as %v, want send order", got)
	}
}

// A delayed send to a topic no queue is bound to is refused at once, as
// an immediate one is: it would otherwise be dropped when due.
func TestDelayedSendWithoutQueueIsRefused(t *testing.T) {
	a := newAdapter(t, newBroker(t))
	err := a.Send(context.Background(), ports.Message{Topic: "nobody", Delay: time.Hour})
	if !errors.Is(err, ports.ErrNoSubscriber) {
		t.Fatalf("delayed send to a topic without a queue returned %v, want ErrNoSubscriber", err)
	}
}

func TestCloseStopsPendingTimer(t *testing.T) {
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	a := newAdapter(t, b)
	if err := ports.DeclareGroup(context.Background(), a, "orders", "g"); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(context.Background(), ports.Message{Topic: "orders", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Scheduled != 0 {
		t.Fatalf("%d entries still scheduled after Close", st.Scheduled)
	}
	// goleak in TestMain proves no timer goroutine is left.
}
