package amqp

import (
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
		want := float64(d+topo.DelaySlack) / float64(time.Millisecond)
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

// A BROADCAST group or instance holding '/' is escaped: group "a/b" with
// instance "c" and group "a" with instance "b/c" name two queues, and a
// name without '/' is kept as it is.
func TestBroadcastNamesDoNotCollide(t *testing.T) {
	topo := newTopology(Options{Namespace: "ns"})
	x := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Group: "a/b", Instance: "c"}
	y := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Group: "a", Instance: "b/c"}
	if topo.queueFor(x) == topo.queueFor(y) {
		t.Fatalf("group a/b instance c and group a instance b/c both name %q", topo.queueFor(x))
	}
	for spec, want := range map[ports.SubscriptionSpec]string{
		x: "ns/t/bc/a~1b/c", y: "ns/t/bc/a/b~1c",
		{Topic: "t", Mode: ports.Broadcast, Group: "a.b", Instance: "pod-7"}: "ns/t/bc/a.b/pod-7",
		{Topic: "t", Mode: ports.LoadBalance, Group: "a/b"}:                  "ns/t/lb/a/b", // one part only: no collision
	} {
		if got := topo.queueFor(spec); got != want {
			t.Errorf("group %q instance %q: queue %q, want %q", spec.Group, spec.Instance, got, want)
		}
	}
}
