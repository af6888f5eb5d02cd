package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("kafka", kafkaSuite) }

// kafkaBench is one suite run: a broker, a topic of N pre-published
// messages, and a fresh consumer group per contender run.
type kafkaBench struct {
	brokers []string
	ns      string
	topic   string // physical
	groups  atomic.Int64
}

const kafkaPartitions = 4

// kafkaSuite consumes the same N pre-published messages (4 partitions)
// three ways, each from a fresh consumer group at the oldest offset, doing
// the same work per message — JSON decode, map, then commit:
//
//   - kafka: this adapter under a flow pipeline (Decode → Map → Sink),
//     InFlight deliveries in flight, each Ack committed as a prefix;
//   - raw-sarama: a sarama consumer-group handler, one message at a time
//     per partition, MarkMessage and a synchronous commit per poll batch;
//   - watermill: a Watermill router over watermill-kafka's subscriber
//     (one un-acked message per partition), ack → mark + commit;
//   - raw-sarama-autocommit (reference): raw-sarama with sarama's 1s
//     auto-commit instead of a commit per poll batch — less commit work.
//
// The messages are published before any contender starts, so
// publish-to-settle latency is not measured (p50/p99 print as 0).
//
// The broker is kfake in this process (a Kafka wire-protocol peer, not
// Apache Kafka) unless KAFKA_BROKERS is set.
func kafkaSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	b := &kafkaBench{ns: "bench" + randSuffix()}
	where := "kfake (in-process Kafka wire-protocol peer, not Apache Kafka)"
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		b.brokers = strings.Split(env, ",")
		where = "KAFKA_BROKERS=" + env
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		b.brokers = c.ListenAddrs()
	}
	fmt.Printf("broker: %s; %d messages pre-published to %d partitions; consume+commit measured\n", where, cfg.N, kafkaPartitions)
	if err := b.prepublish(ctx, cfg); err != nil {
		return nil, nil, err
	}
	warm := cfg
	warm.N = min(cfg.N, 2000)
	contenders := []func(context.Context, Config) (Result, error){b.runRaw, b.runKafka, b.runWatermill, b.runRawAuto}
	for _, run := range contenders {
		if _, err := run(ctx, warm); err != nil {
			return nil, nil, err
		}
	}
	results, err := rounds(ctx, cfg, contenders...)
	return results, []Ratio{
		{Label: "kafka/raw", Num: "kafka", Den: "raw-sarama"},
		{Label: "kafka/watermill", Num: "kafka", Den: "watermill"},
		{Label: "kafka/raw-autocommit", Num: "kafka", Den: "raw-sarama-autocommit"},
	}, err
}

func randSuffix() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff) }

func (b *kafkaBench) adapterConfig() kafka.Config {
	return kafka.Config{
		Brokers: b.brokers, Namespace: b.ns, Partitions: kafkaPartitions, StartFrom: kafka.StartOldest,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 3 * time.Second, RebalanceTimeout: 3 * time.Second,
	}
}

// prepublish sends cfg.N messages in confirmed batches of 500.
func (b *kafkaBench) prepublish(ctx context.Context, cfg Config) error {
	a, err := kafka.New(ctx, b.adapterConfig())
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	b.topic = b.ns + ".bench"
	padding := pad(cfg.Payload)
	batch := make([]ports.Message, 0, 500)
	for i := range cfg.N {
		m, err := flow.NewMessage(ctx, "bench", benchMsg{Device: fmt.Sprintf("dev-%d", i%64), Value: float64(i), Pad: padding})
		if err != nil {
			return err
		}
		m.Key = m.Headers[ports.HeaderID] // spread over partitions, no two alike
		batch = append(batch, m)
		if len(batch) == cap(batch) || i == cfg.N-1 {
			if err := a.Send(ctx, batch...); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

func (b *kafkaBench) group() string { return fmt.Sprintf("%s.g%d", b.ns, b.groups.Add(1)) }

// runKafka: the adapter under a flow pipeline.
func (b *kafkaBench) runKafka(ctx context.Context, cfg Config) (Result, error) {
	a, err := kafka.New(ctx, b.adapterConfig())
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	var done atomic.Int64
	finished := make(chan struct{})
	spec := ports.SubscriptionSpec{Topic: "bench", Group: strings.TrimPrefix(b.group(), b.ns+"."), InFlight: cfg.InFlight}
	p := flow.New(a, spec, flow.WithObserver(func(e flow.Event) {
		if e.Action == ports.Ack && done.Add(1) == int64(cfg.N) {
			close(finished)
		}
	}))
	out := flow.Map(flow.Decode[benchMsg](p.Source()), func(_ context.Context, m benchMsg) (benchOut, error) { return scale(m), nil })
	flow.Sink(out, func(context.Context, benchOut) error { return nil }, flow.Workers(cfg.InFlight))
	var m Meter
	m.Start()
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("kafka: %d of %d settled: %w", done.Load(), cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(cfg.N)
	if s := p.Stats(); s.Acked < int64(cfg.N) {
		return Result{}, fmt.Errorf("kafka: %+v, want %d acked", s, cfg.N)
	}
	return Result{Name: "kafka", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
		Note: fmt.Sprintf("flow Decode→Map→Sink, %d in flight, prefix commits; latency n/a", cfg.InFlight)}, nil
}

// runRaw: sarama's consumer group, sequential per partition, a
// synchronous commit per poll batch.
func (b *kafkaBench) runRaw(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, false)
}

// runRawAuto: the same, but marked offsets are committed by sarama's
// auto-commit every second (less commit work: for reference only).
func (b *kafkaBench) runRawAuto(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, true)
}

func (b *kafkaBench) rawRun(ctx context.Context, cfg Config, auto bool) (Result, error) {
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Offsets.AutoCommit.Enable = auto
	conf.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	conf.Consumer.Group.Session.Timeout = 3 * time.Second
	conf.ChannelBufferSize = max(cfg.InFlight, 16)
	group, err := sarama.NewConsumerGroup(b.brokers, b.group(), conf)
	if err != nil {
		return Result{}, err
	}
	defer group.Close()
	h := &rawHandler{n: int64(cfg.N), auto: auto, finished: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	errc := make(chan error, 1)
	var m Meter
	m.Start()
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			if err := group.Consume(cctx, []string{b.topic}, h); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case <-h.finished:
	case err := <-errc:
		return Result{}, fmt.Errorf("raw: consume: %w", err)
	case <-ctx.Done():
		return Result{}, fmt.Errorf("raw: %d of %d committed: %w", h.done.Load(), cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(cfg.N)
	cancel()
	wg.Wait()
	if h.err != nil {
		return Result{}, h.err
	}
	if auto {
		return Result{Name: "raw-sarama-autocommit", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
			Note: "as raw-sarama, commits by auto-commit (1s); latency n/a"}, nil
	}
	return Result{Name: "raw-sarama", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
		Note: "ConsumeClaim: decode, map, MarkMessage; Commit per poll batch; latency n/a"}, nil
}

type rawHandler struct {
	n        int64
	auto     bool
	done     atomic.Int64
	finished chan struct{}
	once     sync.Once
	err      error
}

func (h *rawHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *rawHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *rawHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	msgs := claim.Messages()
	for cm := range msgs {
		var v benchMsg
		if err := json.Unmarshal(cm.Value, &v); err != nil {
			h.err = err
			return err
		}
		_ = scale(v)
		sess.MarkMessage(cm, "")
		var settled int64 = 1
		for drained := false; !drained; { // the rest of this poll batch
			select {
			case cm, ok := <-msgs:
				if !ok {
					drained = true
					continue
				}
				if err := json.Unmarshal(cm.Value, &v); err != nil {
					h.err = err
					return err
				}
				_ = scale(v)
				sess.MarkMessage(cm, "")
				settled++
			default:
				drained = true
			}
		}
		if !h.auto {
			sess.Commit()
		}
		if h.done.Add(settled) >= h.n {
			h.once.Do(func() { close(h.finished) })
		}
	}
	return nil
}

// runWatermill: a Watermill router over watermill-kafka's subscriber.
func (b *kafkaBench) runWatermill(ctx context.Context, cfg Config) (Result, error) {
	conf := wmkafka.DefaultSaramaSubscriberConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Offsets.AutoCommit.Enable = false // commit after each ack, as the others commit
	conf.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	conf.Consumer.Group.Session.Timeout = 3 * time.Second
	conf.ChannelBufferSize = max(cfg.InFlight, 16)
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: b.brokers, Unmarshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: conf, ConsumerGroup: b.group(),
	}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	router.AddConsumerHandler("bench", b.topic, sub, func(msg *message.Message) error {
		var v benchMsg
		if err := json.Unmarshal(msg.Payload, &v); err != nil {
			return err
		}
		_ = scale(v)
		if done.Add(1) == int64(cfg.N) {
			close(finished)
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	var m Meter
	m.Start()
	go func() { errc <- router.Run(rctx) }()
	select {
	case <-finished:
	case err := <-errc:
		return Result{}, errors.Join(errors.New("watermill router stopped"), err)
	case <-ctx.Done():
		return Result{}, fmt.Errorf("watermill: %d of %d handled: %w", done.Load(), cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(cfg.N)
	cancel()
	<-errc
	_ = sub.Close()
	return Result{Name: "watermill", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
		Note: "Router over watermill-kafka: decode, map; ack → mark + commit; latency n/a"}, nil
}
