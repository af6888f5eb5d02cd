package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kafka"
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

// countingSub counts the Settle calls made through it.
type countingSub struct {
	ports.Subscription
	settles atomic.Int64
}

func (c *countingSub) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	c.settles.Add(1)
	return c.Subscription.Settle(ctx, ds, d)
}

func (c *countingSub) Flush(ctx context.Context) error {
	return c.Subscription.(ports.Flusher).Flush(ctx)
}

// manualCommits is a config whose committer commits only on Flush, revoke
// and stop (no interval or threshold round within a test's time).
func manualCommits(cfg kafka.Options) kafka.Options {
	cfg.CommitInterval = time.Hour
	cfg.CommitThreshold = 1 << 30
	return cfg
}

// TestBatchOneCommit: a batch of N deliveries over two partitions settled
// with one Settle call returns at once (the offsets are recorded, no
// commit request is sent), and the next commit round — here Flush — is
// one OffsetCommit request covering every partition.
func TestBatchOneCommit(t *testing.T) {
	b := newBroker(t)
	if b.cluster == nil {
		t.Skip("counting commit requests needs kfake; KAFKA_BROKERS is set")
	}
	a := b.adapter(t, manualCommits(b.config("bc", 2)))
	s := &countingSub{Subscription: subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64})}
	var all []string
	for i := range 50 {
		all = append(all, strconv.Itoa(i))
	}
	send(t, a, "t", all, all...) // keyed: an unkeyed batch sticks to one partition
	ds := receiveN(t, s, len(all), 10*time.Second)
	want := lastOffsets(t, ds)
	if len(want) != 2 {
		t.Fatalf("the 50 messages landed on partitions %v, want both", want)
	}
	mark := b.commitCount()
	record(t, s, ack, ds...)
	if n := b.commitCount() - mark; n != 0 {
		t.Fatalf("%d commit requests sent by Settle itself, want 0 (deferred: the offsets are only recorded)", n)
	}
	flush(t, s)
	commits := b.commitsSince(mark)
	if got := s.settles.Load(); got != 1 {
		t.Fatalf("%d Settle calls, want 1", got)
	}
	if len(commits) != 1 {
		t.Fatalf("%d OffsetCommit requests for one Settle of %d deliveries, want 1: %+v", len(commits), len(ds), commits)
	}
	for id, off := range want {
		if got := commits[0].offsets[id]; got != off {
			t.Fatalf("batch commit of partition %d = %d, want %d (%+v)", id, got, off, commits[0])
		}
	}
}

// TestManySettlesOneCommitPerRound: 50 concurrent single-delivery Settle
// calls are coalesced by the committer: one round, one OffsetCommit
// request covering both partitions.
func TestManySettlesOneCommitPerRound(t *testing.T) {
	b := newBroker(t)
	if b.cluster == nil {
		t.Skip("counting commit requests needs kfake; KAFKA_BROKERS is set")
	}
	a := b.adapter(t, manualCommits(b.config("ms", 2)))
	s := &countingSub{Subscription: subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64})}
	var all []string
	for i := range 50 {
		all = append(all, strconv.Itoa(i))
	}
	send(t, a, "t", nil, all...)
	ds := receiveN(t, s, len(all), 10*time.Second)
	want := lastOffsets(t, ds)
	mark := b.commitCount()
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			if err := s.Settle(t.Context(), []*ports.Delivery{d}, ack); err != nil {
				t.Errorf("settle: %v", err)
			}
		})
	}
	wg.Wait()
	flush(t, s)
	if got := s.settles.Load(); got != int64(len(ds)) {
		t.Fatalf("%d Settle calls, want %d", got, len(ds))
	}
	commits := b.commitsSince(mark)
	if len(commits) != 1 {
		t.Fatalf("%d OffsetCommit requests for %d Settle calls in one round, want 1: %+v", len(commits), len(ds), commits)
	}
	for id, off := range want {
		if got := commits[0].offsets[id]; got != off {
			t.Fatalf("commit of partition %d = %d, want %d", id, got, off)
		}
	}
}

// TestCommitThresholdAndInterval: without Flush, the committer commits on
// its own — at once when CommitThreshold offsets were recorded, and after
// CommitInterval for fewer.
func TestCommitThresholdAndInterval(t *testing.T) {
	b := newBroker(t)
	cfg := manualCommits(b.config("thr", 1))
	cfg.CommitThreshold = 10
	a := b.adapter(t, cfg)
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64})
	send(t, a, "t", nil, "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	ds := receiveN(t, s, 10, 10*time.Second)
	start := offsetOf(t, ds[0])
	record(t, s, ack, ds[:9]...)
	record(t, s, ack, ds[9])
	awaitCommitted(t, b, "thr.g", "thr.t", 0, start+10, "the threshold of 10 recorded offsets")

	cfg = manualCommits(b.config("ivl", 1))
	cfg.CommitInterval = 50 * time.Millisecond
	a = b.adapter(t, cfg)
	s = subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64})
	send(t, a, "t", nil, "x")
	d := receiveN(t, s, 1, 10*time.Second)[0]
	record(t, s, ack, d)
	awaitCommitted(t, b, "ivl.g", "ivl.t", 0, offsetOf(t, d)+1, "the 50ms commit interval")
}

// awaitCommitted waits (bounded) until group's committed offset is want.
func awaitCommitted(t *testing.T, b *broker, group, topic string, partition int32, want int64, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := b.committed(t, group, topic, partition)
		if c == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offset %d, want %d within 10s (committed by %s)", c, want, why)
		}
		time.Sleep(20 * time.Millisecond) // polling the broker's state, not synchronising
	}
}

// lastOffsets is the commit position (last offset + 1) per partition.
func lastOffsets(t *testing.T, ds []*ports.Delivery) map[int32]int64 {
	t.Helper()
	want := map[int32]int64{}
	for _, d := range ds {
		p, err := strconv.Atoi(d.Facts.Get("partition"))
		if err != nil {
			t.Fatal(err)
		}
		if o := offsetOf(t, d) + 1; o > want[int32(p)] {
			want[int32(p)] = o
		}
	}
	return want
}

// TestStartOffsetsNotCommittedFailsSubscribe: a subscription whose first
// session cannot commit its start offsets is not established: Subscribe
// returns why; once the coordinator accepts commits it subscribes and
// receives.
func TestStartOffsetsNotCommittedFailsSubscribe(t *testing.T) {
	b := newBroker(t)
	if b.cluster == nil {
		t.Skip("fault injection needs kfake; KAFKA_BROKERS is set")
	}
	a := b.adapter(t, b.config("pin", 2))
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	fault := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "pin.g", Err: kerr.GroupAuthorizationFailed, Count: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if s, err := a.Subscribe(ctx, spec); err == nil {
		_ = s.Stop(ctx)
		t.Fatal("Subscribe succeeded while every OffsetCommit of the group was refused")
	} else if !strings.Contains(err.Error(), "committing start offsets failed") || !errors.Is(err, sarama.ErrGroupAuthorizationFailed) {
		t.Fatalf("Subscribe: %v, want the refused start-offset commit", err)
	}
	fault.Remove()
	s := subscribe(t, a, spec)
	send(t, a, "t", nil, "after")
	if got := payloads(receiveN(t, s, 1, 10*time.Second)); got[0] != "after" {
		t.Fatalf("received %q", got)
	}
}

// TestCommittedPositionRetentionDeletedResumesAtTheOldest: a group whose
// committed position lies before what the partition still holds (the
// records were deleted) resumes at the oldest record left: none of those
// is skipped.
func TestCommittedPositionRetentionDeletedResumesAtTheOldest(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("gone", 1))
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	s := subscribe(t, a, spec)
	var all []string
	for i := range 10 {
		all = append(all, fmt.Sprintf("m%d", i))
	}
	send(t, a, "t", nil, all...)
	ds := receiveN(t, s, 10, 10*time.Second)
	settle(t, s, ack, ds[:3]...) // committed position 3
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if got := b.committed(t, "gone.g", kafka.PhysicalTopic("gone", "t"), 0); got != 3 {
		t.Fatalf("committed %d before the deletion, want 3", got)
	}
	adm := b.admin(t)
	defer adm.Close()
	if err := adm.DeleteRecords(kafka.PhysicalTopic("gone", "t"), map[int32]int64{0: 6}); err != nil {
		t.Fatalf("delete records below offset 6: %v", err)
	}
	s2 := subscribe(t, a, spec)
	got := receiveN(t, s2, 4, 10*time.Second)
	if p := payloads(got); !slices.Equal(p, all[6:]) {
		t.Fatalf("after the deletion received %q, want %q (the oldest record left on)", p, all[6:])
	}
}
