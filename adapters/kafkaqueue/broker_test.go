package kafkaqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/kafkaqueue"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
)

func TestMain(m *testing.M) {
	// go-metrics (sarama's, in the kafka:// interop test) runs one process-wide meter ticker.
	wmtest.Main(m, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}

// Test lock timing: a lapsed lock is redelivered within a second.
const testLock = 2 * time.Second

// broker is an in-process kfake cluster (a Kafka wire-protocol peer with
// share groups, not Apache Kafka) for one test.
type broker struct {
	cluster *kfake.Cluster
	addrs   []string

	mu     sync.Mutex
	faults map[string]*kfake.FaultHandle
}

func newBroker(t testing.TB, nodes int) *broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(nodes), kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": fmt.Sprint(testLock.Milliseconds()),
		"share.record.lock.sweep.interval.ms": "100",
		"group.share.delivery.count.limit":    "10",
		"group.share.heartbeat.interval.ms":   "200",
	}))
	if err != nil {
		t.Fatalf("start kfake (a Kafka wire-protocol peer, not Apache Kafka): %v", err)
	}
	t.Cleanup(c.Close)
	return &broker{cluster: c, addrs: c.ListenAddrs(), faults: map[string]*kfake.FaultHandle{}}
}

// newLimitBroker is a one-broker kfake cluster whose share groups
// deliver a record at most limit times, its other settings the defaults.
func newLimitBroker(t testing.TB, limit int) *broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"group.share.delivery.count.limit": fmt.Sprint(limit)}))
	if err != nil {
		t.Fatalf("start kfake (a Kafka wire-protocol peer, not Apache Kafka): %v", err)
	}
	t.Cleanup(c.Close)
	return &broker{cluster: c, addrs: c.ListenAddrs()}
}

func (b *broker) options(ns string, partitions int32) kafkaqueue.Options {
	return kafkaqueue.Options{Brokers: b.addrs, Namespace: ns, Partitions: partitions}
}

func (b *broker) adapter(t testing.TB, o kafkaqueue.Options) *kafkaqueue.Adapter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := kafkaqueue.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// client is a franz-go client of the cluster, as a program without
// sluice has.
func (b *broker) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// fail makes kfake refuse every produce matching when (nil: all), or
// stops refusing, under the name key.
func (b *broker) fail(key string, on bool, when func(kmsg.Request) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.faults[key]; h != nil {
		h.Remove()
		delete(b.faults, key)
	}
	if on {
		b.faults[key] = b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.TopicAuthorizationFailed, Count: -1, When: when})
	}
}
