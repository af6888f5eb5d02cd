package kafka_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) {
	// go-metrics (used by sarama) runs one process-wide meter ticker.
	wmtest.Main(m, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}

// broker is the Kafka the tests talk to: an in-process kfake cluster (a
// Kafka wire-protocol peer, not Apache Kafka) unless KAFKA_BROKERS names a
// real cluster.
type broker struct {
	addrs   []string
	cluster *kfake.Cluster // nil against a real Kafka

	mu      sync.Mutex
	commits []commitSeen
}

// commitSeen is one OffsetCommit request the kfake cluster received.
type commitSeen struct {
	group, member string
	generation    int32
	offsets       map[int32]int64 // partition -> offset (any topic)
}

// Test timing: a rebalance is noticed within one heartbeat.
const (
	testHeartbeat = 100 * time.Millisecond
	testSession   = 2 * time.Second
	testRebalance = 2 * time.Second
)

// realKafka reports whether the tests run against KAFKA_BROKERS.
func realKafka() bool { return os.Getenv("KAFKA_BROKERS") != "" }

// newBroker starts a kfake cluster for one test (so control hooks and
// commit observations do not mix between tests), or returns the real
// cluster of KAFKA_BROKERS.
func newBroker(t testing.TB) *broker {
	t.Helper()
	if realKafka() {
		return &broker{addrs: strings.Split(os.Getenv("KAFKA_BROKERS"), ",")}
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("start kfake (a Kafka wire-protocol peer, not Apache Kafka): %v", err)
	}
	b := &broker{addrs: c.ListenAddrs(), cluster: c}
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		seen := commitSeen{group: r.Group, member: r.MemberID, generation: r.Generation, offsets: map[int32]int64{}}
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				seen.offsets[p.Partition] = p.Offset
			}
		}
		b.mu.Lock()
		b.commits = append(b.commits, seen)
		b.mu.Unlock()
		return nil, nil, false
	})
	t.Cleanup(c.Close)
	return b
}

// commitCount is the number of commits seen so far.
func (b *broker) commitCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.commits)
}

// commitsSince returns the commits seen after the first n.
func (b *broker) commitsSince(n int) []commitSeen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]commitSeen(nil), b.commits[n:]...)
}

// config is an adapter config for this broker with fast group timing.
func (b *broker) config(ns string, partitions int32) kafka.Options {
	return kafka.Options{
		Brokers:           b.addrs,
		Namespace:         ns,
		Partitions:        partitions,
		HeartbeatInterval: testHeartbeat,
		SessionTimeout:    testSession,
		RebalanceTimeout:  testRebalance,
		CommitRetry:       50 * time.Millisecond,
	}
}

// adapter makes an adapter closed at the end of the test.
func (b *broker) adapter(t testing.TB, cfg kafka.Options) *kafka.Adapter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close adapter: %v", err)
		}
	})
	return a
}

// subscribe subscribes and stops the subscription at the end of the test.
func subscribe(t testing.TB, a *kafka.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatalf("subscribe %+v: %v", spec, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// receiveN receives exactly n deliveries within d or fails the test.
func receiveN(t testing.TB, s ports.Subscription, n int, d time.Duration) []*ports.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []*ports.Delivery
	for len(out) < n {
		ds, err := s.Receive(ctx, n-len(out))
		if err != nil {
			t.Fatalf("received %d of %d deliveries: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

// receiveNone asserts that nothing arrives within d.
func receiveNone(t testing.TB, s ports.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ds, err := s.Receive(ctx, 16)
	if err == nil {
		t.Fatalf("expected no delivery within %v, got %d (first %q)", d, len(ds), ds[0].Payload)
	}
}

// send sends msgs to topic (payload = each string, key from keys[i] if any).
func send(t testing.TB, a *kafka.Adapter, topic ports.Topic, keys []string, payloads ...string) {
	t.Helper()
	msgs := make([]ports.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = ports.Message{Topic: topic, Payload: []byte(p)}
		if i < len(keys) {
			msgs[i].Key = keys[i]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// settle settles ds with d and then flushes: when it returns, the
// recorded offsets are committed.
func settle(t testing.TB, s ports.Subscription, d ports.Disposition, ds ...*ports.Delivery) {
	t.Helper()
	record(t, s, d, ds...)
	flush(t, s)
}

// record settles ds with d without flushing (Settle returns once the
// completions are recorded; the commit follows on the committer's round).
func record(t testing.TB, s ports.Subscription, d ports.Disposition, ds ...*ports.Delivery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Settle(ctx, ds, d); err != nil {
		t.Fatalf("settle %v: %v", d.Action, err)
	}
}

// flush commits what s recorded and waits for the broker's answer.
func flush(t testing.TB, s ports.Subscription) {
	t.Helper()
	f, ok := s.(ports.Flusher)
	if !ok {
		t.Fatalf("the kafka subscription %T does not implement ports.Flusher", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func payloads(ds []*ports.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}

var ack = ports.Disposition{Action: ports.Ack}

// admin is a sarama admin client of its own, for the caller to close.
func (b *broker) admin(t testing.TB) sarama.ClusterAdmin {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	adm, err := sarama.NewClusterAdmin(b.addrs, conf)
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	return adm
}

// committed returns the committed offset of group on topic/partition (-1:
// none), read with a separate admin client.
func (b *broker) committed(t testing.TB, group, topic string, partition int32) int64 {
	t.Helper()
	adm := b.admin(t)
	defer adm.Close()
	resp, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {partition}})
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	blk := resp.GetBlock(topic, partition)
	if blk == nil {
		return -1
	}
	return blk.Offset
}

func offsetOf(t testing.TB, d *ports.Delivery) int64 {
	t.Helper()
	n, err := strconv.ParseInt(d.Facts.Get("offset"), 10, 64)
	if err != nil {
		t.Fatalf("offset fact %q: %v", d.Facts.Get("offset"), err)
	}
	return n
}

// failProduce makes the kfake cluster refuse every produce to topic (all
// topics when ""), until the returned function is called. It skips the
// test against a real Kafka.
func (b *broker) failProduce(t testing.TB, topic string) (restore func()) {
	t.Helper()
	if b.cluster == nil {
		t.Skip("fault injection needs kfake; KAFKA_BROKERS is set")
	}
	h := b.cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: topic,
		Err:   kerr.TopicAuthorizationFailed,
		Count: -1,
	})
	return h.Remove
}
