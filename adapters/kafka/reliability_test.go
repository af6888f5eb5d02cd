package kafka_test

import (
	"context"
	"net"
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
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"

	"github.com/sluicemq/sluice/adapters/internal/freeport"
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
			return d.Facts.Get("topic") + "/" + d.Facts.Get("partition") + "@" + d.Facts.Get("offset")
		},
		SoakMessages: 100_000,
		// No Deferred: Settle only records (its acceptance is deferred, see
		// ports.Subscription.Settle) and never returns a commit error; a
		// failed commit is retried by the committer and reported through
		// Errors, and a commit that never lands means a redelivery.
		// go-metrics (used by sarama) runs one process-wide meter ticker,
		// started by the first client (see TestMain).
		IgnoreLeaks: []goleak.Option{goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick")},
	})
}

// dialKafka makes an adapter with the tests' fast group timing (Kafka keeps
// no per-client session, so the process identity is not needed).
func dialKafka(ctx context.Context, addr, _ string) (ports.Adapter, error) {
	return kafka.New(ctx, kafka.Options{
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
	port, err := freeport.One() // the cluster's, the same across restarts
	if err != nil {
		t.Fatal(err)
	}
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

// startFuzzConsumers consumes topic, sending every handled delivery to
// handled, and its dead-letter topic, sending every delivery that
// arrives there to dead — also one the dead-letter consumer cannot
// handle (its envelope is poison too).
func startFuzzConsumers(tb testing.TB, a ports.Adapter, topic ports.Topic, handled, dead chan<- *ports.Delivery) {
	ctx := context.Background()
	p := flow.New(a, ports.SubscriptionSpec{Topic: topic, Group: "fuzz", InFlight: 4}, flow.WithErrorHandler(func(error) {}))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		handled <- d
		return nil
	})
	dp := flow.New(a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic(topic), Group: "fuzz", InFlight: 4},
		flow.WithErrorHandler(func(error) {}),
		flow.WithObserver(func(e flow.Event) {
			if e.Received {
				dead <- e.Delivery
			}
		}))
	flow.Sink(dp.Source(), func(context.Context, *ports.Delivery) error { return nil })
	for _, x := range []*flow.Pipeline{p, dp} {
		if err := x.Start(ctx); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = x.Stop(ctx) })
	}
}

// FuzzRecordFromWire sends records with arbitrary keys, headers (among
// them the adapter's own redelivery-count and not-before headers) and
// values from a plain sarama producer — what a foreign or broken producer
// could write — through kfake to a pipeline over the adapter. Each must end
// handled or dead-lettered within a bound, never a panic, a hang or a
// silent drop: a malformed adapter header is poison with the header named
// in the dead-letter reason; anything else is handled with its key,
// headers and value intact.
func FuzzRecordFromWire(f *testing.F) {
	f.Add("k", "x-custom", "v", "", "", []byte("{}"))
	f.Add("", "", "", "-1", "", []byte(nil))
	f.Add("key", ports.HeaderID, "id-1", "2", "yesterday", []byte("x"))
	f.Add("\xff", ports.HeaderRedeliveryCount, "7", "1e3", "2001-02-03T04:05:06Z", []byte("\x00"))
	f.Add("k", kafka.HeaderNotBefore, "x", "99999999999999999999", "2001-02-03T04:05:06.999999999+01:00", []byte("{}"))
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	ctx := context.Background()
	a, err := dialKafka(ctx, addr, "")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = a.Close(ctx) })
	topic := ports.Topic("fuzz.wire")
	handled, dead := make(chan *ports.Delivery, 1), make(chan *ports.Delivery, 1)
	startFuzzConsumers(f, a, topic, handled, dead)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	producer, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = producer.Close() })
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, key, name, value, count, notBefore string, payload []byte) {
		if name == "fuzz-seq" {
			name = "x-" + name
		}
		nb, nbErr := time.Parse(time.RFC3339Nano, notBefore)
		if notBefore != "" && nbErr == nil && nb.After(time.Now()) {
			t.Skip("a valid not-before in the future holds the record until then (the delay contract)")
		}
		mark := strconv.FormatInt(seq.Add(1), 10)
		headers := []sarama.RecordHeader{{Key: []byte("fuzz-seq"), Value: []byte(mark)}}
		if name != "" {
			headers = append(headers, sarama.RecordHeader{Key: []byte(name), Value: []byte(value)})
		}
		if count != "" {
			headers = append(headers, sarama.RecordHeader{Key: []byte(ports.HeaderRedeliveryCount), Value: []byte(count)})
		}
		if notBefore != "" {
			headers = append(headers, sarama.RecordHeader{Key: []byte(kafka.HeaderNotBefore), Value: []byte(notBefore)})
		}
		// What the adapter decodes: the last header of each name wins.
		final := map[string]string{}
		for _, h := range headers {
			final[string(h.Key)] = string(h.Value)
		}
		_, badCount := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, final[ports.HeaderRedeliveryCount]))
		nbv, hasNB := final[kafka.HeaderNotBefore]
		_, badNB := time.Parse(time.RFC3339Nano, nbv)
		if hasNB && badNB == nil {
			if tm, _ := time.Parse(time.RFC3339Nano, nbv); tm.After(time.Now()) {
				t.Skip("a valid not-before in the future holds the record (the delay contract)")
			}
		}
		wantPoison := badCount != nil || (hasNB && badNB != nil)
		pm := &sarama.ProducerMessage{Topic: "rel." + string(topic), Value: sarama.ByteEncoder(payload), Headers: headers}
		if key != "" {
			pm.Key = sarama.StringEncoder(key)
		}
		if _, _, err := producer.SendMessage(pm); err != nil {
			t.Fatalf("plain producer: %v", err)
		}
		deadline := time.After(20 * time.Second)
		for {
			select {
			case d := <-handled:
				if d.Headers.Get("fuzz-seq") != mark {
					continue
				}
				if wantPoison {
					t.Fatalf("a record with malformed adapter headers %q was handled", final)
				}
				if d.Key != key || string(d.Payload) != string(payload) {
					t.Fatalf("key %q payload %q, sent %q %q", d.Key, d.Payload, key, payload)
				}
				if _, ok := d.Headers.Lookup(kafka.HeaderNotBefore); ok {
					t.Fatalf("the not-before header leaked: %q", d.Headers)
				}
				if name != "" && name != kafka.HeaderNotBefore && d.Headers.Get(name) != final[name] {
					t.Fatalf("header %q = %q, sent %q", name, d.Headers.Get(name), final[name])
				}
				return
			case d := <-dead:
				if d.Headers.Get("fuzz-seq") != mark {
					continue
				}
				if !wantPoison {
					t.Fatalf("a well-formed record was dead-lettered: %q", d.Headers.Get(ports.HeaderDeadLetterReason))
				}
				if reason := d.Headers.Get(ports.HeaderDeadLetterReason); !strings.Contains(reason, "malformed header") {
					t.Fatalf("dead-letter reason %q does not name the malformed header", reason)
				}
				return
			case <-deadline:
				t.Fatalf("record %s (headers %q) neither handled nor dead-lettered within 20s: a hang or a silent drop", mark, final)
			}
		}
	})
}

// TestDeadLetterOfMalformedEnvelopeIsReadable: a record dead-lettered
// because its redelivery-count header is malformed must be readable by a
// consumer of the dead-letter topic (to inspect, repair or redrive it).
func TestDeadLetterOfMalformedEnvelopeIsReadable(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := dialKafka(ctx, c.ListenAddrs()[0], "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	topic := ports.Topic("malformed.count")
	handled, arrived := make(chan *ports.Delivery, 4), make(chan *ports.Delivery, 4)
	startFuzzConsumers(t, a, topic, handled, arrived)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(c.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "rel." + string(topic), Value: sarama.StringEncoder("{}"),
		Headers: []sarama.RecordHeader{{Key: []byte(ports.HeaderRedeliveryCount), Value: []byte("-1")}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-arrived:
		if d.Err != nil {
			t.Fatalf("the dead-letter copy keeps the malformed %s=%q header, so a sluice consumer "+
				"of the dead-letter topic finds it poison again (%v) and dead-letters it on to %s.dlq.dlq: it can never be handled "+
				"from the dead-letter topic", ports.HeaderRedeliveryCount, d.Headers.Get(ports.HeaderRedeliveryCount), d.Err, topic)
		}
		t.Logf("dead letter readable, reason %q", d.Headers.Get(ports.HeaderDeadLetterReason))
	case d := <-handled:
		t.Fatalf("a record with a malformed redelivery count was handled: %q", d.Headers)
	case <-ctx.Done():
		t.Fatal("the record never reached the dead-letter topic")
	}
}
