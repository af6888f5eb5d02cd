package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

const kafkaPartitions = 4

// The kafka suite consumes the same N records, pre-published once to a
// 4-partition topic, each contender run from a fresh consumer group at the
// oldest offset, doing the same work per record (JSON decode, map) and
// settling it for at-least-once:
//
//	sarama-mark-autocommit  best raw (1): sarama consumer group, MarkMessage
//	                        after the handler, auto-commit (1s)
//	franz-automarks         best raw (2): franz-go group consumer with
//	                        AutoCommitMarks, MarkCommitRecords after the
//	                        handler; the faster of the two is the denominator
//	sarama-commit-per-poll  weaker: a synchronous Commit per poll batch
//	sarama-mark-autocommit-bare, franz-automarks-bare
//	                        the two best raw configurations over bare
//	                        records (the same payloads and keys, no
//	                        headers: Kafka has no content-type field),
//	                        pre-published once with franz-go to a topic of
//	                        their own; the faster is RATIO kafka/bare-raw's
//	                        denominator
//	kafka, kafka-batch      sluice default and batch pipelines (the batch
//	                        handler reads values only: ValuesOnly)
//	kafka-batch-msgs        diagnostic: the batch pipeline without
//	                        ValuesOnly (its handler gets the deliveries)
//	kafka-linger0           diagnostic: the default pipeline, linger 0
//	kafka-inflight4x        diagnostic: the default pipeline, 4× in-flight
//	watermill               Watermill router over watermill-kafka
//	kafka-latency           default pipeline, fresh topic, paced producer
//
// Every other contender reads the records the adapter wrote, its envelope
// (content type and id) in record headers.
//
// The broker is kfake in the bench's process (a Kafka wire-protocol peer,
// not Apache Kafka; the contenders reach it over 127.0.0.1) unless
// KAFKA_BROKERS is set. The backlog check: -n 200000 -only kafka prints
// the per-second series of the median round (PERSECOND).
func init() {
	// Setup pre-published the N records every contender consumes: the
	// sluice contenders publish nothing during the timed section.
	t := target{open: openKafka, prepublished: true, openLatency: openKafkaLatency}
	withMsgs := t
	withMsgs.batchMsgs = true
	register(Suite{
		Name:      "kafka",
		About:     "consume + settle of pre-published records, timed from the first record received",
		Shared:    true,
		PerSecond: true,
		DefaultN:  300000,
		Setup:     setupKafkaAndBare,
		Contenders: []Contender{
			{Name: "sarama-mark-autocommit", Run: runSaramaAuto("topic")},
			{Name: "franz-automarks", Run: runFranz("topic")},
			{Name: "sarama-commit-per-poll", Run: runSaramaPerPoll},
			{Name: "sarama-mark-autocommit-bare", Run: runSaramaAuto("topic_bare")},
			{Name: "franz-automarks-bare", Run: runFranz("topic_bare")},
			{Name: "kafka", Run: t.runPipeline(false)},
			{Name: "kafka-batch", Run: t.runPipeline(true)},
			// Diagnostic: the batch pipeline handing its handler the
			// deliveries (no recycling, no deferred headers).
			{Name: "kafka-batch-msgs", Run: withMsgs.runPipeline(true)},
			// Diagnostic: the default pipeline with rounds settled at once.
			{Name: "kafka-linger0", Run: t.runPipeline(false, flow.WithSettleLinger(0))},
			// Diagnostic: the default pipeline with 4× the in-flight window.
			{Name: "kafka-inflight4x", Run: t.scaledInFlight(4).runPipeline(false)},
			{Name: "watermill", Run: runKafkaWatermill},
			{Name: "kafka-latency", Latency: true, Run: t.runLatency()},
		},
		Ratios: []Ratio{
			{Label: "kafka-linger0/best-raw", Num: "kafka-linger0", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "kafka/best-raw", Num: "kafka", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "kafka-batch/best-raw", Num: "kafka-batch", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "kafka-batch-msgs/best-raw", Num: "kafka-batch-msgs", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "kafka-inflight4x/best-raw", Num: "kafka-inflight4x", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "watermill/best-raw", Num: "watermill", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "franz-automarks/sarama-mark-autocommit", Num: "franz-automarks", Den: []string{"sarama-mark-autocommit"}},
			{Label: "sarama-mark-autocommit-bare/best-raw", Num: "sarama-mark-autocommit-bare", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "franz-automarks-bare/best-raw", Num: "franz-automarks-bare", Den: []string{"sarama-mark-autocommit", "franz-automarks"}},
			{Label: "kafka/bare-raw", Num: "kafka", Den: []string{"sarama-mark-autocommit-bare", "franz-automarks-bare"}},
		},
	})
}

// setupKafka starts kfake (or uses KAFKA_BROKERS) and pre-publishes N
// records through the adapter, once for every contender.
func setupKafka(ctx context.Context, cfg Config) (Env, func(), error) {
	return setupKafkaWith(ctx, cfg, fmt.Sprintf("bench%d", os.Getpid()), "kfake in the bench process (Kafka wire protocol, not Apache Kafka)",
		func(ctx context.Context, env Env) (ports.Adapter, error) { return kafka.New(ctx, kafkaConfig(env)) },
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
}

// setupKafkaAndBare is setupKafka and the same N records bare, for the
// -bare contenders.
func setupKafkaAndBare(ctx context.Context, cfg Config) (Env, func(), error) {
	env, cleanup, err := setupKafka(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := prepublishBare(ctx, env, cfg); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, cleanup, nil
}

// prepublishBare creates topic <ns>.bench-bare with kafkaPartitions
// partitions and produces records 0..N-1 to it with franz-go: the
// payloads and keys prepublishKeyed sends, without headers, in batches
// compressed as the adapter's are (not at all), so that the two topics
// differ in their headers alone. It sets env["topic_bare"].
func prepublishBare(ctx context.Context, env Env, cfg Config) error {
	topic := env["ns"] + ".bench-bare"
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env["brokers"], ",")...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // franz-go's default is snappy
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopic(strings.Split(env["brokers"], ","), topic); err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	padding := pad(cfg.Payload)
	batch := make([]*kgo.Record, 0, 500)
	for i := range cfg.N {
		batch = append(batch, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: encodeMsg(i, padding)})
		if len(batch) == cap(batch) || i == cfg.N-1 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return fmt.Errorf("pre-publish bare: %w", err)
			}
			batch = batch[:0]
		}
	}
	env["topic_bare"] = topic
	fmt.Printf("%d bare records (payload and key, no headers, uncompressed as the adapter's) pre-published to %s (%d partitions)\n", cfg.N, topic, kafkaPartitions)
	return nil
}

// setupKafkaWith is a Kafka suite's Setup: the broker (kafkaBroker), then
// N records pre-published under namespace ns through the adapter open
// returns.
func setupKafkaWith(ctx context.Context, cfg Config, ns, banner string, open func(context.Context, Env) (ports.Adapter, error), opts ...kfake.Opt) (Env, func(), error) {
	env := Env{"ns": ns}
	cleanup, err := kafkaBroker(env, banner, opts...)
	if err != nil {
		return nil, nil, err
	}
	a, err := open(ctx, env)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	defer a.Close(context.Background())
	if err := prepublishKeyed(ctx, a, env, cfg); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, cleanup, nil
}

// kafkaBroker sets env["brokers"]: KAFKA_BROKERS when set, else a
// one-broker kfake cluster with opts started in this process (banner
// says what it is); cleanup stops it.
func kafkaBroker(env Env, banner string, opts ...kfake.Opt) (func(), error) {
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		env["brokers"] = b
		fmt.Println("broker: KAFKA_BROKERS=" + b)
		return func() {}, nil
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		return nil, err
	}
	env["brokers"] = strings.Join(c.ListenAddrs(), ",")
	env[brokerPIDEnv] = strconv.Itoa(os.Getpid()) // kfake runs in this (otherwise idle) process
	fmt.Println("broker: " + banner)
	return c.Close, nil
}

// prepublishKeyed sends records 0..N-1 of topic "bench" through a, keyed
// by index so they spread over the partitions, and sets env["topic"].
func prepublishKeyed(ctx context.Context, a ports.Sender, env Env, cfg Config) error {
	padding := pad(cfg.Payload)
	batch := make([]ports.Message, 0, 500)
	for i := range cfg.N {
		m := benchMessage("bench", i, padding, false)
		m.Key = strconv.Itoa(i) // spread over the partitions
		batch = append(batch, m)
		if len(batch) == cap(batch) || i == cfg.N-1 {
			if err := a.Send(ctx, batch...); err != nil {
				return fmt.Errorf("pre-publish: %w", err)
			}
			batch = batch[:0]
		}
	}
	env["topic"] = env["ns"] + ".bench"
	fmt.Printf("%d records pre-published to %s (%d partitions)\n", cfg.N, env["topic"], kafkaPartitions)
	return nil
}

func kafkaConfig(env Env) kafka.Options {
	return kafka.Options{
		Brokers: strings.Split(env["brokers"], ","), Namespace: env["ns"], Partitions: kafkaPartitions, StartFrom: kafka.StartOldest,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 3 * time.Second, RebalanceTimeout: 3 * time.Second,
		Compression: env["compression"], // a diagnostic contender's; empty: the default
		Logger:      quiet,
	}
}

// freshGroup names a consumer group no earlier run used.
func freshGroup() string { return fmt.Sprintf("g%d-%d", os.Getpid(), time.Now().UnixNano()%1e9) }

func openKafka(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := kafka.New(ctx, kafkaConfig(env))
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	return a, ports.SubscriptionSpec{Topic: "bench", Group: freshGroup(), InFlight: cfg.InFlight}, func() { _ = a.Close(context.Background()) }, nil
}

func openKafkaLatency(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, spec, closeFn, err := openKafka(ctx, env, cfg)
	spec.Topic = ports.Topic(fmt.Sprintf("latency%d", os.Getpid()))
	return a, spec, closeFn, err
}

func saramaConfig(cfg Config) *sarama.Config {
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	conf.Consumer.Group.Session.Timeout = 3 * time.Second
	return conf
}

// runSaramaAuto consumes env[topicKey] ("topic": the adapter's records,
// "topic_bare": the bare ones).
func runSaramaAuto(topicKey string) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		res, err := saramaRun(ctx, env, cfg, env[topicKey], true)
		res.Note = "sarama group: handler, MarkMessage, auto-commit 1s" + bareNote(topicKey)
		return res, err
	}
}

// bareNote is what a contender's note adds when it reads bare records.
func bareNote(topicKey string) string {
	if topicKey == "topic_bare" {
		return ", bare records"
	}
	return ""
}

func runSaramaPerPoll(ctx context.Context, env Env, cfg Config) (Result, error) {
	res, err := saramaRun(ctx, env, cfg, env["topic"], false)
	res.Note = "sarama group: handler, MarkMessage, sync Commit per poll batch"
	return res, err
}

func saramaRun(ctx context.Context, env Env, cfg Config, topic string, auto bool) (Result, error) {
	conf := saramaConfig(cfg)
	conf.Consumer.Offsets.AutoCommit.Enable = auto
	group, err := sarama.NewConsumerGroup(strings.Split(env["brokers"], ","), freshGroup(), conf)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	h := &saramaHandler{tl: tl, m: m, auto: auto}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	errc := make(chan error, 1)
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			if err := group.Consume(cctx, []string{topic}, h); err != nil {
				errc <- err
				return
			}
		}
	}()
	name := "sarama"
	select {
	case <-tl.done:
	case err := <-errc:
		cancel()
		return Result{}, fmt.Errorf("%s: consume: %w", name, err)
	case <-ctx.Done():
		cancel()
		return Result{}, tl.wait(ctx, name)
	}
	res, err := m.finish(name)
	cancel()
	wg.Wait()
	_ = group.Close()
	if h.err != nil {
		return Result{}, h.err
	}
	return res, err
}

type saramaHandler struct {
	tl   *tally
	m    *Meter
	auto bool
	mu   sync.Mutex
	err  error
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) fail(err error) error {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	return err
}

func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	msgs := claim.Messages()
	for cm := range msgs {
		h.m.begin()
		i, err := handleJSON(cm.Value)
		if err != nil {
			return h.fail(err)
		}
		sess.MarkMessage(cm, "")
		if h.auto {
			h.tl.mark(i)
			continue
		}
		marked := []int{i}
		for drained := false; !drained; { // the rest of this poll batch
			select {
			case cm, ok := <-msgs:
				if !ok {
					drained = true
					continue
				}
				i, err := handleJSON(cm.Value)
				if err != nil {
					return h.fail(err)
				}
				sess.MarkMessage(cm, "")
				marked = append(marked, i)
			default:
				drained = true
			}
		}
		sess.Commit()
		for _, i := range marked {
			h.tl.mark(i)
		}
	}
	return nil
}

// runFranz is franz-go's group consumer with AutoCommitMarks, reading
// env[topicKey].
func runFranz(topicKey string) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return franzRun(ctx, env, cfg, env[topicKey], bareName("franz-automarks", topicKey != "topic_bare"), bareNote(topicKey))
	}
}

func franzRun(ctx context.Context, env Env, cfg Config, topic, name, note string) (Result, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(env["brokers"], ",")...),
		kgo.ConsumerGroup(freshGroup()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(3*time.Second),
	)
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	tl := newTally(cfg.N)
	m := newMeter(tl)
	for {
		select {
		case <-tl.done:
			return finishNote(m, name, "franz-go group: handler, MarkCommitRecords, AutoCommitMarks"+note)
		default:
		}
		if err := franzHandle(ctx, cl, tl, m, name, func(r *kgo.Record, i int) {
			cl.MarkCommitRecords(r)
			tl.mark(i)
		}); err != nil {
			return Result{}, err
		}
	}
}

// franzHandle polls cl once and runs the raw handler (handleJSON) on
// every record, then each with the record and its index.
func franzHandle(ctx context.Context, cl *kgo.Client, tl *tally, m *Meter, name string, each func(r *kgo.Record, i int)) error {
	fs := cl.PollFetches(ctx)
	if ctx.Err() != nil {
		return tl.wait(ctx, name)
	}
	if errs := fs.Errors(); len(errs) > 0 {
		return fmt.Errorf("%s: fetch: %v", name, errs[0].Err)
	}
	var ferr error
	fs.EachRecord(func(r *kgo.Record) {
		if ferr != nil {
			return
		}
		m.begin()
		i, err := handleJSON(r.Value)
		if err != nil {
			ferr = err
			return
		}
		each(r, i)
	})
	return ferr
}

func finishNote(m *Meter, name, note string) (Result, error) {
	res, err := m.finish(name)
	res.Note = note
	return res, err
}

// runKafkaWatermill is a Watermill router over watermill-kafka's subscriber.
func runKafkaWatermill(ctx context.Context, env Env, cfg Config) (Result, error) {
	conf := wmkafka.DefaultSaramaSubscriberConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	conf.Consumer.Group.Session.Timeout = 3 * time.Second
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: strings.Split(env["brokers"], ","), Unmarshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: conf, ConsumerGroup: freshGroup(),
	}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	defer sub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	router.AddConsumerHandler("bench", env["topic"], sub, func(msg *message.Message) error {
		m.begin()
		i, err := handleJSON(msg.Payload)
		if err != nil {
			return err
		}
		tl.mark(i) // the ack (mark) follows the handler's return
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- router.Run(rctx) }()
	select {
	case <-tl.done:
	case err := <-errc:
		return Result{}, errors.Join(errors.New("watermill router stopped"), err)
	case <-ctx.Done():
		return Result{}, tl.wait(ctx, "watermill")
	}
	res, err := finishNote(m, "watermill", "Router over watermill-kafka (default config: auto-commit); ack → mark")
	cancel()
	<-errc
	return res, err
}
