package amqp

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestBucketRoundsUpWithinGranularity: a delay queue's TTL is never below
// the delay plus slack, and at most one grid step (plus a millisecond of
// rounding) above it.
func TestBucketRoundsUpWithinGranularity(t *testing.T) {
	topo := newTopology(Options{Namespace: "n", QueueType: Quorum, DelayGranularity: 0.05, DelaySlack: 10 * time.Millisecond})
	prev := int64(0)
	for ms := 0; ms < 200000; ms += 1 + ms/50 {
		d := time.Duration(ms) * time.Millisecond
		b := topo.bucket(d)
		want := float64(d+topo.slack) / float64(time.Millisecond)
		if float64(b) < want {
			t.Fatalf("delay %v: bucket %dms is below %vms", d, b, want)
		}
		if float64(b) > want*1.05+1 {
			t.Fatalf("delay %v: bucket %dms is more than one 5%% step above %vms", d, b, want)
		}
		if b < prev {
			t.Fatalf("delay %v: bucket %d below the previous %d (not monotonic)", d, b, prev)
		}
		prev = b
	}
}

// TestQueueNamesShortened keeps queue names within AMQP's limit and
// distinct.
func TestQueueNamesShortened(t *testing.T) {
	topo := newTopology(Options{Namespace: "n", QueueType: Quorum})
	long := ports.Topic(string(make([]byte, 0)) + "t")
	for len(long) < 200 {
		long += "x"
	}
	a := topo.queue(long, "lb", "group-a")
	b := topo.queue(long, "lb", "group-b")
	if len(a) > maxQueueName || len(b) > maxQueueName || a == b {
		t.Fatalf("names %q (%d) and %q (%d): want distinct names of at most %d bytes", a, len(a), b, len(b), maxQueueName)
	}
}

// A BROADCAST group or instance holding '/' is refused: group "a/b" with
// instance "c" and group "a" with instance "b/c" would name one queue.
func TestBroadcastNamesThatCouldCollideAreRefused(t *testing.T) {
	topo := newTopology(Options{Namespace: "ns"})
	x := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Group: "a/b", Instance: "c"}
	y := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Group: "a", Instance: "b/c"}
	if topo.queueFor(x) != topo.queueFor(y) {
		t.Fatalf("the two specs name %q and %q: the test no longer shows the collision it guards against", topo.queueFor(x), topo.queueFor(y))
	}
	for _, spec := range []ports.SubscriptionSpec{x, y} {
		err := broadcastNames(spec)
		var ve *ports.ValueError
		if !errors.As(err, &ve) || !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("group %q instance %q: %v, want a ValueError", spec.Group, spec.Instance, err)
		}
	}
	for _, spec := range []ports.SubscriptionSpec{
		{Topic: "t", Mode: ports.Broadcast, Group: "a.b", Instance: "pod-7"},
		{Topic: "t", Mode: ports.LoadBalance, Group: "a/b"}, // one part only: no collision
	} {
		if err := broadcastNames(spec); err != nil {
			t.Errorf("group %q instance %q: %v, want it accepted", spec.Group, spec.Instance, err)
		}
	}
}
