package kafka_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestOutOfOrderCommitsPrefix: completions arrive out of order; only the
// contiguous prefix of completed offsets is ever committed, and a restart
// redelivers everything from the first gap on.
func TestOutOfOrderCommitsPrefix(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("ooo", 1)
	a := b.adapter(t, cfg)
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 16}
	s := subscribe(t, a, spec)
	const group, topic = "ooo.g", "ooo.t"

	send(t, a, "t", nil, "0", "1", "2", "3", "4")
	ds := receiveN(t, s, 5, 10*time.Second)
	if p := payloads(ds); !slices.Equal(p, []string{"0", "1", "2", "3", "4"}) {
		t.Fatalf("got %q: a single partition is handed out in offset order", p)
	}
	start := offsetOf(t, ds[0])
	if c := b.committed(t, group, topic, 0); c != start {
		t.Fatalf("before any ack committed = %d, want the pinned start %d", c, start)
	}

	settle(t, s, ack, ds[4])
	settle(t, s, ack, ds[2], ds[3])
	if c := b.committed(t, group, topic, 0); c != start {
		t.Fatalf("after acking 2..4 with 0 and 1 pending: committed = %d, want %d", c, start)
	}
	settle(t, s, ack, ds[0])
	if c := b.committed(t, group, topic, 0); c != start+1 {
		t.Fatalf("after acking 0: committed = %d, want %d", c, start+1)
	}
	settle(t, s, ack, ds[1])
	if c := b.committed(t, group, topic, 0); c != start+5 {
		t.Fatalf("after acking 1 (closing the gap): committed = %d, want %d", c, start+5)
	}

	// A gap left open at stop: 5 pending, 6 and 7 acked.
	send(t, a, "t", nil, "5", "6", "7")
	ds = receiveN(t, s, 3, 10*time.Second)
	settle(t, s, ack, ds[1], ds[2])
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c := b.committed(t, group, topic, 0); c != start+5 {
		t.Fatalf("after stop with offset %d unsettled: committed = %d, want %d", start+5, c, start+5)
	}
	s2 := subscribe(t, b.adapter(t, cfg), spec)
	again := receiveN(t, s2, 3, 10*time.Second)
	if p := payloads(again); !slices.Equal(p, []string{"5", "6", "7"}) {
		t.Fatalf("after restart got %q, want 5 6 7 redelivered (nothing past the gap was committed)", p)
	}
	settle(t, s2, ack, again...)
	if c := b.committed(t, group, topic, 0); c != start+8 {
		t.Fatalf("final committed = %d, want %d", c, start+8)
	}
}

// TestBatchOneCommit: a batch settled with one Settle call is committed
// with one OffsetCommit request covering every partition it touched.
func TestBatchOneCommit(t *testing.T) {
	b := newBroker(t)
	if b.cluster == nil {
		t.Skip("counting commit requests needs kfake; KAFKA_BROKERS is set")
	}
	a := b.adapter(t, b.config("bc", 2))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 32})
	send(t, a, "t", nil, "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11")
	ds := receiveN(t, s, 12, 10*time.Second)
	want := map[string]int64{}
	for _, d := range ds {
		if o := offsetOf(t, d) + 1; o > want[d.Facts["partition"]] {
			want[d.Facts["partition"]] = o
		}
	}
	mark := b.commitCount()
	settle(t, s, ack, ds...)
	commits := b.commitsSince(mark)
	if len(commits) != 1 {
		t.Fatalf("%d commit requests for one batch settlement, want 1: %+v", len(commits), commits)
	}
	for p, off := range want {
		var id int32
		if p == "1" {
			id = 1
		}
		if got := commits[0].offsets[id]; got != off {
			t.Fatalf("batch commit of partition %s = %d, want %d (%+v)", p, got, off, commits[0])
		}
	}
}
