package mem_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every blocking call of the tests.
const wait = 5 * time.Second

// manualClock is a Clock whose time moves only by Advance, which runs the
// timers that fell due synchronously, in deadline order.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c     *manualClock
	due   time.Time
	f     func()
	armed bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) mem.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, due: c.now.Add(d), f: f, armed: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed, t.due = true, t.c.now.Add(d)
	return was
}

// Advance moves the clock by d, firing due timers one at a time (a fired
// timer may re-arm itself for a deadline still within d).
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *manualTimer
		for _, t := range c.timers {
			if t.armed && !t.due.After(end) && (next == nil || t.due.Before(next.due)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		if next.due.After(c.now) {
			c.now = next.due
		}
		next.armed = false
		c.mu.Unlock()
		next.f()
	}
}

// newBroker returns a broker closed at the end of the test.
func newBroker(t testing.TB, opts ...mem.BrokerOption) *mem.Broker {
	t.Helper()
	b, err := mem.NewBroker(opts...)
	if err != nil {
		t.Fatalf("NewBroker: %v", err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// newAdapter returns an adapter closed at the end of the test.
func newAdapter(t testing.TB, b *mem.Broker, opts ...mem.Option) *mem.Adapter {
	t.Helper()
	a, err := mem.New(b, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// subscribe starts a subscription stopped at the end of the test.
func subscribe(t testing.TB, a ports.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	t.Helper()
	s, err := a.Subscribe(context.Background(), spec)
	if err != nil {
		t.Fatalf("Subscribe(%+v): %v", spec, err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// lb is a LoadBalance spec.
func lb(topic, group string) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: group}
}

// send sends one message per payload to topic and fails the test on error.
func send(t testing.TB, a ports.Sender, topic string, payloads ...string) {
	t.Helper()
	msgs := make([]ports.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = ports.Message{Topic: ports.Topic(topic), Payload: []byte(p)}
	}
	if err := a.Send(context.Background(), msgs...); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// receive receives exactly n deliveries, failing after a bounded wait.
func receive(t testing.TB, s ports.Subscription, n int) []*ports.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []*ports.Delivery
	for len(out) < n {
		ds, err := s.Receive(ctx, n-len(out))
		if err != nil {
			t.Fatalf("Receive: got %d of %d deliveries: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

// receiveBlocked asserts that Receive has nothing to return within a short
// bound (for states the broker's Stats cannot show, such as a full
// in-flight window).
func receiveBlocked(t testing.TB, s ports.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	ds, err := s.Receive(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive: got %d deliveries, err %v; want it to block", len(ds), err)
	}
}

// settle settles ds with d and fails the test on error.
func settle(t testing.TB, s ports.Subscription, d ports.Disposition, ds ...*ports.Delivery) {
	t.Helper()
	if err := s.Settle(context.Background(), ds, d); err != nil {
		t.Fatalf("Settle %v: %v", d.Action, err)
	}
}

var (
	ack     = ports.Disposition{Action: ports.Ack}
	requeue = ports.Disposition{Action: ports.Requeue}
)

// payloads returns the payloads of ds in order.
func payloads(ds []*ports.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}

// sorted returns a sorted copy.
func sorted(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

// queueStats returns the stats of a LoadBalance queue in the default
// namespace, failing when it does not exist.
func queueStats(t testing.TB, b *mem.Broker, topic, group string) mem.QueueStats {
	t.Helper()
	q, ok := b.Stats().Queue("", ports.Topic(topic), group, "")
	if !ok {
		t.Fatalf("no queue for topic %q group %q", topic, group)
	}
	return q
}

// waitForWaiting polls the broker until n consumers of the LoadBalance
// queue (topic, group) are blocked in Receive, failing after a bounded
// wait. It lets a test act only once a Receive is really blocked.
func waitForWaiting(t testing.TB, b *mem.Broker, topic, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if q, ok := b.Stats().Queue("", ports.Topic(topic), group, ""); ok && q.Waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d consumers blocked in Receive", n)
		}
		time.Sleep(time.Millisecond) // polling a counter, bounded by the deadline
	}
}
