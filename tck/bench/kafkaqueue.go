package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/kafkaqueue" // registers kafkaqueue://
	"github.com/sluicemq/sluice/ports"
)

// The kafkaqueue suite consumes the same N records, pre-published once to
// a 4-partition topic, through Kafka share groups (KIP-932): each
// contender run joins a fresh share group that starts at the oldest
// record, does the same work per record (JSON decode, map) and accepts
// every record explicitly after its handler ran:
//
//	franz-share       best raw (1): franz-go's share consumer
//	                  (kgo.ShareGroup), defaults; handler per record, then
//	                  one MarkAcks(AckAccept, …) for the poll's records
//	                  before the next poll, so no record is ever accepted
//	                  by the next poll's implicit accept; the final
//	                  FlushAcks is timed
//	franz-share-wait10ms  best raw (2): the same with FetchMaxWait 10ms.
//	                  franz-go piggybacks acks on the next ShareFetch, and
//	                  once the backlog is drained that fetch long-polls
//	                  (500ms by default), so the final FlushAcks waits up
//	                  to 500ms; 10ms bounds that tail. The faster of the
//	                  two is the denominator
//	kafkaqueue        sluice: kafkaqueue:// with defaults, flow.Decode → Sink
//	kafkaqueue-batch  sluice: flow.Decode → operators.Batch(50, 5ms) → Sink
//	kafkaqueue-wait10ms  diagnostic: the default pipeline with
//	                  fetch_max_wait=10ms, as franz-share-wait10ms (an
//	                  acknowledgement waits for the fetch in flight on its
//	                  share session, a long poll once the backlog is drained)
//
// A record counts when its accept was handed to the client (franz-go's
// MarkAcks) or when Settle returned (sluice: kafkaqueue:// defers accepts
// too); the last accepts are flushed inside the timed section on both
// sides (FlushAcks, ports.Flusher.Flush). After the
// timed section each run reads its share group's state back
// (DescribeShareGroupOffsets) and fails unless every partition's start
// offset reached its end with no lag: all N records settled, none left
// acquired or available. The broker is kfake in the bench's process with
// share groups (a Kafka wire-protocol peer, not Apache Kafka) unless
// KAFKA_BROKERS is set (Kafka 4.x with share groups enabled).
func init() {
	register(Suite{
		Name:      "kafkaqueue",
		About:     "share-group consume + explicit accept of pre-published records, timed from the first record received; share-group state verified after each run",
		Shared:    true,
		PerSecond: true,
		DefaultN:  150000,
		Setup:     setupKafkaQueue,
		Contenders: []Contender{
			{Name: "franz-share", Run: runFranzShare(0)},
			{Name: "franz-share-wait10ms", Run: runFranzShare(10 * time.Millisecond)},
			{Name: "kafkaqueue", Run: runKafkaQueue(false)},
			{Name: "kafkaqueue-batch", Run: runKafkaQueue(true)},
			{Name: "kafkaqueue-wait10ms", Run: runKafkaQueue(false, "fetch_max_wait=10ms")},
		},
		Ratios: []Ratio{
			{Label: "kafkaqueue/best-raw", Num: "kafkaqueue", Den: []string{"franz-share", "franz-share-wait10ms"}},
			{Label: "kafkaqueue-batch/best-raw", Num: "kafkaqueue-batch", Den: []string{"franz-share", "franz-share-wait10ms"}},
			{Label: "kafkaqueue-wait10ms/best-raw", Num: "kafkaqueue-wait10ms", Den: []string{"franz-share", "franz-share-wait10ms"}},
		},
	})
}

// kafkaQueueURL is the adapter URL every sluice contender opens: defaults
// but for the topic's partitions (the topic exists already) and the start
// of a new share group (the records were published before it).
// params are more URL parameters (diagnostic contenders).
func kafkaQueueURL(env Env, params ...string) string {
	u := fmt.Sprintf("kafkaqueue://%s/%s?partitions=%d&start_oldest=true", env["brokers"], env["ns"], kafkaPartitions)
	for _, p := range params {
		u += "&" + p
	}
	return u
}

// setupKafkaQueue starts kfake with share groups (or uses KAFKA_BROKERS)
// and pre-publishes N records through kafkaqueue://, once for every
// contender.
func setupKafkaQueue(ctx context.Context, cfg Config) (Env, func(), error) {
	return setupKafkaWith(ctx, cfg, fmt.Sprintf("benchq%d", os.Getpid()), "kfake in the bench process with share groups (Kafka wire protocol, not Apache Kafka)",
		func(ctx context.Context, env Env) (ports.Adapter, error) {
			return adapters.Open(ctx, kafkaQueueURL(env), adapters.WithLogger(quiet))
		},
		kfake.BrokerConfigs(map[string]string{"group.share.heartbeat.interval.ms": "200"}))
}

// runKafkaQueue is the generic sluice pipeline (target.runPipeline's)
// over kafkaqueue:// (the default or the batch one), then the share
// group's state check; params are more URL parameters. The adapter defers
// its accepts (ports.Flusher): the Settle that accepts the last record
// flushes them, inside the timed section, as franz-share's final
// FlushAcks is.
func runKafkaQueue(batch bool, params ...string) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		var group string
		t := target{prepublished: true, open: func(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
			a, err := adapters.Open(ctx, kafkaQueueURL(env, params...), adapters.WithLogger(quiet))
			if err != nil {
				return nil, ports.SubscriptionSpec{}, nil, err
			}
			group = freshGroup()
			spec := ports.SubscriptionSpec{Topic: "bench", Group: group, InFlight: cfg.InFlight}
			return &flushedAdapter{Adapter: a, n: int64(cfg.N)}, spec, func() { _ = a.Close(context.Background()) }, nil
		}}
		res, err := t.runPipeline(batch)(ctx, env, cfg)
		if err != nil {
			return res, err
		}
		res.Note += "; final Flush timed"
		// The adapter names a LoadBalance group's share group <namespace>.<group>.
		return res, verifyShareGroup(ctx, env, env["ns"]+"."+group, cfg.N)
	}
}

// flushedAdapter's subscriptions flush their deferred settlements
// (ports.Flusher) in the Settle that accepts the n-th record, and call
// flushed, when set, once that Flush returned nil.
type flushedAdapter struct {
	ports.Adapter
	n       int64
	flushed func()
}

// Unwrap lets ports.ApplySpecDefaults see the wrapped adapter.
func (f *flushedAdapter) Unwrap() ports.Adapter { return f.Adapter }

func (f *flushedAdapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	s, err := f.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	fs := &flushedSub{Subscription: s, flushed: f.flushed}
	fs.left.Store(f.n)
	return fs, nil
}

// flushedSub keeps the optional interfaces flow looks for (ports.Flusher,
// ports.ReceiveAppender, ports.Predecoder, ports.Recycler,
// ports.HeaderDeferrer, ports.HeaderLookup) of the subscription it wraps.
type flushedSub struct {
	ports.Subscription
	left    atomic.Int64 // records to accept before the flush
	flushed func()
}

func (s *flushedSub) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	err := s.Subscription.Settle(ctx, ds, disp)
	if err == nil && disp.Action == ports.Ack && s.left.Add(-int64(len(ds))) == 0 {
		if err = s.Flush(ctx); err != nil {
			err = fmt.Errorf("flush: %w", err)
		} else if s.flushed != nil {
			s.flushed()
		}
	}
	return err
}

func (s *flushedSub) Flush(ctx context.Context) error {
	return s.Subscription.(ports.Flusher).Flush(ctx)
}

func (s *flushedSub) Recycle(ds []*ports.Delivery) {
	if r, ok := s.Subscription.(ports.Recycler); ok {
		r.Recycle(ds)
	}
}

func (s *flushedSub) Predecode(decode func(payload []byte) any) {
	if p, ok := s.Subscription.(ports.Predecoder); ok {
		p.Predecode(decode)
	}
}

func (s *flushedSub) DeferHeaders() {
	if h, ok := s.Subscription.(ports.HeaderDeferrer); ok {
		h.DeferHeaders()
	}
}

func (s *flushedSub) LoadHeaders(d *ports.Delivery) {
	if h, ok := s.Subscription.(ports.HeaderDeferrer); ok {
		h.LoadHeaders(d)
	}
}

func (s *flushedSub) LookupHeader(d *ports.Delivery, name string) (string, bool) {
	if h, ok := s.Subscription.(ports.HeaderLookup); ok {
		return h.LookupHeader(d, name)
	}
	return d.Headers.Lookup(name)
}

func (s *flushedSub) ReceiveAppend(ctx context.Context, dst []*ports.Delivery, max int) ([]*ports.Delivery, error) {
	return s.Subscription.(ports.ReceiveAppender).ReceiveAppend(ctx, dst, max)
}

// runFranzShare is franz-go's share consumer with every record accepted
// explicitly after its handler, before the next poll; wait, when set, is
// its FetchMaxWait.
func runFranzShare(wait time.Duration) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return franzShare(ctx, env, cfg, wait)
	}
}

func franzShare(ctx context.Context, env Env, cfg Config, wait time.Duration) (Result, error) {
	name, note := "franz-share", "franz-go share consumer: handler, MarkAcks(AckAccept) per poll before the next poll, FlushAcks at the end"
	if wait > 0 {
		name, note = fmt.Sprintf("franz-share-wait%v", wait), note+fmt.Sprintf("; FetchMaxWait %v", wait)
	}
	brokers := strings.Split(env["brokers"], ",")
	group := env["ns"] + "." + freshGroup()
	if err := shareStartEarliest(ctx, brokers, group); err != nil {
		return Result{}, err
	}
	var (
		mu     sync.Mutex
		ackErr error
	)
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ShareGroup(group),
		kgo.ConsumeTopics(env["topic"]),
		kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			if err := rs.Error(); err != nil {
				mu.Lock()
				if ackErr == nil {
					ackErr = err
				}
				mu.Unlock()
			}
		}),
	}
	if wait > 0 {
		opts = append(opts, kgo.FetchMaxWait(wait))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	tl := newTally(cfg.N)
	m := newMeter(tl)
	var (
		recs []*kgo.Record
		ids  []int
	)
	for {
		select {
		case <-tl.done:
			// The last accepts are still queued in the client: they are
			// part of the work, so they are timed.
			if err := cl.FlushAcks(ctx); err != nil {
				return Result{}, fmt.Errorf("%s: flush acks: %w", name, err)
			}
			res, err := finishNote(m, name, note)
			mu.Lock()
			err = errors.Join(err, ackErr)
			mu.Unlock()
			if err != nil {
				return Result{}, err
			}
			return res, verifyShareGroup(ctx, env, group, cfg.N)
		default:
		}
		recs, ids = recs[:0], ids[:0]
		if err := franzHandle(ctx, cl, tl, m, name, func(r *kgo.Record, i int) {
			recs = append(recs, r)
			ids = append(ids, i)
		}); err != nil {
			return Result{}, err
		}
		// One batched accept for the poll: the client groups it by
		// partition and sends it on the partition leader's share session.
		cl.MarkAcks(kgo.AckAccept, recs...)
		for _, i := range ids {
			tl.mark(i)
		}
	}
}

// shareStartEarliest sets a share group's share.auto.offset.reset to
// earliest before any member joins (a new share group starts at the
// topic's end otherwise) and waits until the broker reports it.
func shareStartEarliest(ctx context.Context, brokers []string, group string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	r.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("share.auto.offset.reset: %w", err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("share.auto.offset.reset: %w", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		d := kmsg.NewPtrDescribeConfigsRequest()
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
		dr.ConfigNames = []string{"share.auto.offset.reset"}
		d.Resources = append(d.Resources, dr)
		dresp, err := d.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("describe share.auto.offset.reset: %w", err)
		}
		for _, r := range dresp.Resources {
			for _, c := range r.Configs {
				if c.Name == "share.auto.offset.reset" && c.Value != nil && *c.Value == "earliest" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("share group %s: share.auto.offset.reset=earliest not applied after 30s", group)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// verifyShareGroup reads a share group's state back (untimed) and fails
// unless its start offsets over the topic's partitions add up to n with
// no lag: every record settled, none acquired or available. Only accepts
// are sent, so every settled record was accepted.
func verifyShareGroup(ctx context.Context, env Env, group string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env["brokers"], ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	t := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	t.Topic = env["topic"]
	for p := range int32(kafkaPartitions) {
		t.Partitions = append(t.Partitions, p)
	}
	g.Topics = append(g.Topics, t)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("share group %s: describe offsets: %w", group, err)
	}
	var settled, lag int64
	parts := 0
	for _, rg := range resp.Groups {
		if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
			return fmt.Errorf("share group %s: describe offsets: %w", group, err)
		}
		for _, rt := range rg.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("share group %s partition %d: %w", group, rp.Partition, err)
				}
				parts++
				settled += max(rp.StartOffset, 0)
				lag += max(rp.Lag, 0)
			}
		}
	}
	if parts != kafkaPartitions || settled != int64(n) || lag != 0 {
		return fmt.Errorf("share group %s: %d partitions described, start offsets add up to %d of %d records, lag %d: the contender is broken, its figure is void", group, parts, settled, n, lag)
	}
	return nil
}
