package kafka_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestReliability runs the fault kit against kfake (a Kafka wire-protocol
// peer, NOT Apache Kafka), a fresh cluster per scenario. The cluster
// persists to a data directory, so broker-restart closes it and starts a
// new one on the same port from that directory; it sits behind the kit's
// proxy and advertises the proxy's address in its metadata, so every
// client connection can be cut, stalled or reset. The consumer-kill
// scenario re-executes this test binary as the consumer process. The soak
// (100,000 messages) runs with:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/kafka/
func TestReliability(t *testing.T) {
	if realKafka() {
		t.Skip("TestReliability injects faults into kfake; it does not run against KAFKA_BROKERS")
	}
	faults.Run(t, faults.Target{
		Name:  "kafka",
		Dial:  dialKafka,
		Start: startFaultyKfake,
		Position: func(d *ports.Delivery) string {
			return d.Facts["topic"] + "/" + d.Facts["partition"] + "@" + d.Facts["offset"]
		},
		SoakMessages: 100_000,
		SettleErrorBug: "in adapters/kafka (Settle of an Ack whose offset commit fails, e.g. \"broker not connected\" while " +
			"the broker restarts or a connection is reset, returns the error but keeps the completion recorded, and the " +
			"committer commits it on its next round: the core reports the message left unsettled for redelivery, which never comes; " +
			"see docs/reliability.md)",
		// go-metrics (used by sarama) runs one process-wide meter ticker,
		// started by the first client (see TestMain).
		IgnoreLeaks: []goleak.Option{goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick")},
	})
}

// dialKafka makes an adapter with the tests' fast group timing.
func dialKafka(ctx context.Context, addr string) (ports.Adapter, error) {
	return kafka.New(ctx, kafka.Config{
		Brokers:           []string{addr},
		Namespace:         "rel",
		Partitions:        2,
		HeartbeatInterval: testHeartbeat,
		SessionTimeout:    testSession,
		RebalanceTimeout:  testRebalance,
		CommitRetry:       50 * time.Millisecond,
	})
}

// advertised is a listener that tells kfake it listens at the proxy's
// address, which kfake then puts in its metadata.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// faultyKfake is one persistent kfake cluster behind a proxy, restartable,
// with produce faults.
type faultyKfake struct {
	t    *testing.T
	opts []kfake.Opt

	mu      sync.Mutex
	cluster *kfake.Cluster
	dlq     *kfake.FaultHandle
	sends   *kfake.FaultHandle
	failDLQ bool
	failAll bool
}

func startFaultyKfake(t *testing.T) *faults.Broker {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // reserve the cluster's port
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	px, err := faults.NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	proxyAddr, err := net.ResolveTCPAddr("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	k := &faultyKfake{t: t, opts: []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DataDir(t.TempDir()),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			l, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			return advertised{Listener: l, addr: proxyAddr}, nil
		}),
	}}
	if err := k.start(); err != nil {
		t.Fatalf("start kfake (a Kafka wire-protocol peer, not Apache Kafka): %v", err)
	}
	t.Cleanup(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.cluster.Close()
	})
	return &faults.Broker{
		Addr:  px.Addr(),
		Proxy: px,
		Restart: func(ctx context.Context) error {
			k.mu.Lock()
			k.cluster.Close()
			k.mu.Unlock()
			return k.start()
		},
		RestartNote:     "kfake persists to a data directory: the cluster is closed and a new one started on the same port from it",
		FailDeadLetters: func(fail bool) { k.set(&k.failDLQ, fail) },
		FailSends:       func(fail bool) { k.set(&k.failAll, fail) },
		FailSendsNote:   "kfake refuses every produce (TOPIC_AUTHORIZATION_FAILED): nothing is stored",
	}
}

// start starts the cluster and installs the faults that are on.
func (k *faultyKfake) start() error {
	c, err := kfake.NewCluster(k.opts...)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cluster, k.dlq, k.sends = c, nil, nil
	k.applyLocked()
	return nil
}

func (k *faultyKfake) set(flag *bool, on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	*flag = on
	k.applyLocked()
}

// applyLocked makes the cluster's produce faults match the flags.
func (k *faultyKfake) applyLocked() {
	toggle := func(slot **kfake.FaultHandle, on bool, when func(kmsg.Request) bool) {
		switch {
		case on && *slot == nil:
			*slot = k.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.TopicAuthorizationFailed, Count: -1, When: when})
		case !on && *slot != nil:
			(*slot).Remove()
			*slot = nil
		}
	}
	toggle(&k.dlq, k.failDLQ, func(req kmsg.Request) bool {
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if strings.HasSuffix(tp.Topic, ports.DeadLetterSuffix) {
				return true
			}
		}
		return false
	})
	toggle(&k.sends, k.failAll, nil)
}
