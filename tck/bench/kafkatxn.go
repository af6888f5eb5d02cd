package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The kafka-txn suite is consume → transform → produce exactly once: each
// contender run reads the N records Setup pre-published (setupKafka) from a
// fresh group, transforms each into one record on an output topic of its
// own, and commits the outputs with the consumed offsets in one Kafka
// transaction per batch:
//
//	franz-txn+env  best raw: franz-go GroupTransactSession (KIP-447
//	            fencing, read-committed fetches), one transaction per poll;
//	            each output carries the envelope sluice's carries
//	            (content type, id, causation and correlation ids from
//	            the input's id)
//	franz-txn   the same with bare outputs (a value, no headers): the
//	            denominator of RATIO kafka-txn/bare-raw
//	kafka-txn   sluice: flow.Decode → Map → TransactTo, one transaction
//	            per commit round (CommitInterval, CommitThreshold)
//	kafka-txn-inflight10x  diagnostic: the same with 10× the in-flight
//	            window, so 10× larger transactions
//	kafka-txn-snappy  diagnostic: the same with the adapter's outputs
//	            compressed with snappy (kafka.Options.Compression), as
//	            franz-go's contenders compress theirs (franz-go's default;
//	            the adapter's is none)
//
// A record counts when its transaction committed: franz-go's when End
// reports the commit; sluice's when the group's committed offsets of the
// input, which commit in the same transaction as the results, reach the
// input's end (polled every 2 ms; a pending transaction's offsets are not
// visible). After the timed section each run reads its output topic
// read-committed and fails unless it holds exactly N distinct results,
// none twice. The broker is kfake unless KAFKA_BROKERS is set, as for the
// kafka suite.
func init() {
	register(Suite{
		Name:     "kafka-txn",
		About:    "consume + transform + produce + commit in one transaction per batch, timed from the first record received; outputs verified read-committed",
		Shared:   true,
		DefaultN: 100000,
		Setup:    setupKafka,
		Contenders: []Contender{
			{Name: "franz-txn+env", Run: runFranzTxn(true)},
			{Name: "franz-txn", Run: runFranzTxn(false)},
			{Name: "kafka-txn", Run: runSluiceTxn},
			{Name: "kafka-txn-inflight10x", Run: func(ctx context.Context, env Env, cfg Config) (Result, error) {
				cfg.InFlight *= 10
				return runSluiceTxn(ctx, env, cfg)
			}},
			{Name: "kafka-txn-snappy", Run: func(ctx context.Context, env Env, cfg Config) (Result, error) {
				env = maps.Clone(env)
				env["compression"] = "snappy"
				res, err := runSluiceTxn(ctx, env, cfg)
				res.Note = "compression snappy; " + res.Note
				return res, err
			}},
		},
		Ratios: []Ratio{
			{Label: "kafka-txn/best-raw", Num: "kafka-txn", Den: []string{"franz-txn+env"}},
			{Label: "kafka-txn-inflight10x/best-raw", Num: "kafka-txn-inflight10x", Den: []string{"franz-txn+env"}},
			{Label: "kafka-txn-snappy/best-raw", Num: "kafka-txn-snappy", Den: []string{"franz-txn+env"}},
			{Label: "franz-txn/best-raw", Num: "franz-txn", Den: []string{"franz-txn+env"}},
			{Label: "kafka-txn/bare-raw", Num: "kafka-txn", Den: []string{"franz-txn"}},
		},
	})
}

// txnOut is a transformed record: the input's index and the scaled value.
type txnOut struct {
	In     int     `json:"in"`
	Scaled float64 `json:"scaled"`
}

// outTopic names a contender run's output topic: logical (for sluice) and
// physical.
func outTopic(env Env) (ports.Topic, string) {
	name := fmt.Sprintf("txnout-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	return ports.Topic(name), env["ns"] + "." + name
}

// runFranzTxn is franz-go's GroupTransactSession, its outputs carrying
// sluice's envelope when envelope.
func runFranzTxn(envelope bool) func(context.Context, Env, Config) (Result, error) {
	name, note := "franz-txn", "franz-go GroupTransactSession: Begin, Produce per record, End(TryCommit) per poll"
	if envelope {
		name, note = name+"+env", note+"; outputs carry sluice's envelope headers"
	} else {
		note += "; bare outputs"
	}
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return franzTxn(ctx, env, cfg, name, note, envelope)
	}
}

func franzTxn(ctx context.Context, env Env, cfg Config, name, note string, envelope bool) (Result, error) {
	headers := 0 // on each output
	if envelope {
		headers = envelopeLen
	}
	_, out := outTopic(env)
	brokers := strings.Split(env["brokers"], ",")
	if err := createTopic(brokers, out); err != nil {
		return Result{}, err
	}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(fmt.Sprintf("bench-txn-%d", os.Getpid())),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.ConsumerGroup(freshGroup()),
		kgo.ConsumeTopics(env["topic"]),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic(out),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(3*time.Second),
	)
	if err != nil {
		return Result{}, err
	}
	defer sess.Close()
	tl := newTally(cfg.N)
	m := newMeter(tl)
	var marks []int
	for {
		select {
		case <-tl.done:
			res, err := finishNote(m, name, note)
			if err == nil {
				err = verifyOutput(ctx, brokers, out, cfg.N, headers)
			}
			return res, err
		default:
		}
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			return Result{}, tl.wait(ctx, name)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return Result{}, fmt.Errorf("%s: fetch: %v", name, errs[0].Err)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return Result{}, fmt.Errorf("%s: begin: %w", name, err)
		}
		marks = marks[:0]
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			m.begin()
			var v benchMsg
			if err := json.Unmarshal(r.Value, &v); err != nil {
				ferr = err
				return
			}
			o := scale(v)
			b, _ := json.Marshal(txnOut{In: int(v.Value), Scaled: o.Scaled})
			rec := &kgo.Record{Value: b}
			if envelope {
				rec.Headers = envelopeHeaders(r)
			}
			sess.Produce(ctx, rec, nil) // End flushes and fails on any produce error
			marks = append(marks, int(v.Value))
		})
		if ferr != nil {
			return Result{}, ferr
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return Result{}, fmt.Errorf("%s: end: %w", name, err)
		}
		if committed {
			for _, i := range marks {
				tl.mark(i)
			}
		}
	}
}

// envelopeHeaders are the headers flow.TransactTo writes on the output of
// input r: NewMessage's content type, causation and correlation ids (the
// input's id) and its new id. The constant value is shared.
func envelopeHeaders(r *kgo.Record) []kgo.RecordHeader {
	var in []byte
	for _, h := range r.Headers {
		if h.Key == ports.HeaderID {
			in = h.Value
		}
	}
	return []kgo.RecordHeader{
		{Key: ports.HeaderContentType, Value: jsonType},
		{Key: ports.HeaderCausationID, Value: in},
		{Key: ports.HeaderCorrelationID, Value: in},
		{Key: ports.HeaderID, Value: ports.AppendNewID(make([]byte, 0, 48))},
	}
}

// jsonType is the content type, which the client only reads.
var jsonType = []byte("application/json")

func runSluiceTxn(ctx context.Context, env Env, cfg Config) (Result, error) {
	a, spec, closeFn, err := openKafka(ctx, env, cfg)
	if err != nil {
		return Result{}, err
	}
	defer closeFn()
	out, phys := outTopic(env)
	brokers := strings.Split(env["brokers"], ",")
	if err := createTopic(brokers, phys); err != nil {
		return Result{}, err
	}
	spec.QoS = ports.ExactlyOnce
	tl := newTally(cfg.N)
	m := newMeter(tl)
	// The records count when their transaction commits, which an ACK
	// does not wait for (the commit loop commits on an interval, as for
	// offsets): the Settle that accepts the last record flushes the last
	// transaction, inside the timed section (as franz-txn ends a
	// transaction per poll), and once that Flush returned every record's
	// results and input offset are committed. The broker is asked
	// afterwards, untimed, whether the input offsets do reach the end.
	p := flow.New(&flushedTxnAdapter{flushedAdapter{Adapter: a, n: int64(cfg.N), flushed: func() {
		for i := range cfg.N {
			tl.mark(i)
		}
	}}}, spec)
	results := flow.Map(flow.Decode[benchMsg](p.Source()), func(_ context.Context, v benchMsg) (txnOut, error) {
		m.begin() // the first record handled starts the clock, without an observer (which turns reuse off)
		return txnOut{In: int(v.Value), Scaled: scale(v).Scaled}, nil
	})
	flow.TransactTo(results, out)
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	if err := waitAll(ctx, "kafka-txn", tl, nil); err != nil {
		return Result{}, err
	}
	res, err := m.finish("kafka-txn")
	if err != nil {
		return Result{}, err
	}
	rounds := float64(cfg.N) / float64(max(p.Stats().SettleCalls, 1))
	res.Note = fmt.Sprintf("flow.Decode → Map → TransactTo, in-flight %d; %.1f records per ACK round; counted when the Flush of the last transaction returned; final Flush timed", cfg.InFlight, rounds)
	if err := verifyInputCommitted(brokers, kafkawire.Group(env["ns"], spec), kafkawire.Topic(env["ns"], spec.Topic)); err != nil {
		return Result{}, err
	}
	return res, verifyOutput(ctx, brokers, phys, cfg.N, envelopeLen)
}

// verifyInputCommitted fails unless the committed offsets of group on
// topic reach the end of each of its partitions (untimed): a transaction's
// offsets become visible when it commits, with the results it produced.
func verifyInputCommitted(brokers []string, group, topic string) error {
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	cl, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return err
	}
	defer cl.Close()
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		return err
	}
	parts, err := cl.Partitions(topic)
	end := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if err == nil {
			end[p], err = cl.GetOffset(topic, p, sarama.OffsetNewest)
		}
	}
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	// A broker may apply a committed transaction's offsets a little after
	// its EndTxn answered (Kafka writes the markers afterwards): asked
	// every 10 ms for up to 10 s.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
		switch {
		case err == nil && covered(resp, topic, end):
			return nil
		case time.Now().After(deadline) && err != nil:
			return fmt.Errorf("committed offsets of %s: %w", group, err)
		case time.Now().After(deadline):
			return fmt.Errorf("group %s: the committed offsets of %s do not reach its end 10s after the last transaction's Flush returned: the contender is broken, its figure is void", group, topic)
		}
	}
}

// covered reports whether resp's offsets of topic reach end on every
// partition.
func covered(resp *sarama.OffsetFetchResponse, topic string, end map[int32]int64) bool {
	for p, e := range end {
		b := resp.GetBlock(topic, p)
		if b == nil || b.Err != sarama.ErrNoError || b.Offset < e {
			return false
		}
	}
	return true
}

// createTopic creates a physical topic of kafkaPartitions partitions.
func createTopic(brokers []string, topic string) error {
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	admin, err := sarama.NewClusterAdmin(brokers, conf)
	if err != nil {
		return err
	}
	defer admin.Close()
	return admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: kafkaPartitions, ReplicationFactor: 1}, false)
}

// envelopeLen is how many headers an output with the envelope carries:
// franz-txn+env's, which sluice's outputs must match.
var envelopeLen = len(envelopeHeaders(&kgo.Record{}))

// verifyOutput reads topic read-committed from its start and fails unless
// it holds exactly n distinct results, none twice, each with headers
// headers (untimed).
func verifyOutput(ctx context.Context, brokers []string, topic string, n, headers int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	seen := make([]int, n)
	distinct, dups, bad := 0, 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for distinct < n && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var o txnOut
			if json.Unmarshal(r.Value, &o) != nil || o.In < 0 || o.In >= n || len(r.Headers) != headers {
				bad++
				return
			}
			if seen[o.In]++; seen[o.In] == 1 {
				distinct++
			} else {
				dups++
			}
		})
	}
	// A duplicate committed after the last result would show within a poll.
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	cl.PollFetches(pctx).EachRecord(func(*kgo.Record) { dups++ })
	cancel()
	if distinct != n || dups != 0 || bad != 0 {
		return fmt.Errorf("output %s read committed: %d distinct results of %d, %d duplicates, %d foreign or without %d headers: the contender is broken, its figure is void", topic, distinct, n, dups, bad, headers)
	}
	return nil
}

// flushedTxnAdapter is a flushedAdapter whose transactional subscriptions
// flush too.
type flushedTxnAdapter struct{ flushedAdapter }

func (f *flushedTxnAdapter) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (ports.TransactionalSubscription, error) {
	s, err := f.Adapter.(ports.TransactionalSubscriber).SubscribeTransactional(ctx, spec)
	if err != nil {
		return nil, err
	}
	fs := &flushedTxnSub{flushedSub{Subscription: s, flushed: f.flushed}}
	fs.left.Store(f.n)
	return fs, nil
}

// flushedTxnSub is a flushedSub that stages.
type flushedTxnSub struct{ flushedSub }

func (s *flushedTxnSub) Stage(ctx context.Context, d *ports.Delivery, msgs []ports.Message) error {
	return s.Subscription.(ports.TransactionalSubscription).Stage(ctx, d, msgs)
}
