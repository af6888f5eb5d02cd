package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

// The redis suite, on two private redis-servers (redistest): one without
// persistence (the throughput comparisons; the adapter with
// durability=none) and one with appendonly yes + appendfsync always (the
// cost of the adapter's default fsync durability on publish). $REDIS_ADDR
// replaces both (durability=none).
//
// consume + settle of N pre-published entries (timed from the first
// delivery); the raw contenders' entries carry the fields the adapter
// writes for the same benchMessage (envelopeFields), except the -bare
// ones':
//
//	raw-xreadgroup-pipelined  best raw: go-redis, each round trip one
//	                   pipeline of the XACK of the entries read last and the
//	                   next XREADGROUP COUNT = in-flight
//	raw-xreadgroup-concurrent best raw: 4 consumers of the group, each
//	                   XREADGROUP COUNT = in-flight/4 and one XACK per read,
//	                   concurrently (the denominator is the better of the
//	                   two)
//	raw-xreadgroup     weaker: one consumer, XREADGROUP then XACK, strictly
//	                   one after the other
//	raw-xreadgroup-pipelined-bare, raw-xreadgroup-concurrent-bare,
//	raw-xreadgroup-bare
//	                   the same three over bare entries (one "payload"
//	                   field: a stream entry has no content type); as
//	                   for best-raw, the best of the three is RATIO
//	                   redis/bare-raw's denominator (on a loaded machine
//	                   the sequential one has measured fastest)
//	redis, redis-batch sluice default and batch pipelines
//	redis-inflight4x   diagnostic: the default pipeline, 4× in-flight
//	                   (each XREADGROUP and XACK carries more entries)
//	watermill          Watermill router over watermill-redisstream's
//	                   subscriber
//	redis-latency      default pipeline with a paced concurrent producer
//
// confirmed publish of N messages (the stream's length is checked):
//
//	raw-xadd-pipe-envelope  best raw: go-redis, 16 goroutines × pipelines
//	                     of 16 XADDs, each entry carrying the fields the
//	                     adapter writes (content type, id, sequence
//	                     header), made per message
//	raw-xadd-pipe        the same with bare entries: redis-publish/bare-raw
//	redis-publish        Adapter.Send from 16 goroutines × 16 messages
//	raw-xadd-pipe-fsync  raw-xadd-pipe-envelope on the fsync server
//	redis-publish-fsync  Adapter.Send, durability fsync, 16 × 16
func init() {
	t := target{open: openRedis(false), prepare: prepareRedis}
	register(Suite{
		Name:     "redis",
		About:    "consume suites pre-publish N entries per run and time consume + settle from the first delivery; servers are private redis-server 7.0 processes",
		DefaultN: 100000,
		Setup:    setupRedis,
		Contenders: []Contender{
			{Name: "raw-xreadgroup-pipelined", Run: runRawXReadGroupPipelined(true)},
			{Name: "raw-xreadgroup-concurrent", Run: runRawXReadGroupConcurrent(4, true)},
			{Name: "raw-xreadgroup", Run: runRawXReadGroup(true)},
			{Name: "raw-xreadgroup-pipelined-bare", Run: runRawXReadGroupPipelined(false)},
			{Name: "raw-xreadgroup-concurrent-bare", Run: runRawXReadGroupConcurrent(4, false)},
			{Name: "raw-xreadgroup-bare", Run: runRawXReadGroup(false)},
			{Name: "redis", Run: t.runPipeline(false)},
			{Name: "redis-batch", Run: t.runPipeline(true)},
			{Name: "redis-inflight4x", Run: t.scaledInFlight(4).runPipeline(false)},
			{Name: "watermill", Run: runRedisWatermill},
			{Name: "raw-xadd-pipe", Run: runRawXAdd("addr", "raw-xadd-pipe", false)},
			{Name: "raw-xadd-pipe-envelope", Run: runRawXAdd("addr", "raw-xadd-pipe-envelope", true)},
			{Name: "redis-publish", Run: runRedisPublish("addr", "redis-publish", redis.DurabilityNone)},
			{Name: "raw-xadd-pipe-fsync", Run: runRawXAdd("addr_fsync", "raw-xadd-pipe-fsync", true)},
			{Name: "redis-publish-fsync", Run: runRedisPublish("addr_fsync", "redis-publish-fsync", redis.DurabilityFsync)},
			{Name: "redis-latency", Latency: true, Run: target{open: openRedis(false)}.runLatency()},
		},
		Ratios: []Ratio{
			{Label: "redis/best-raw", Num: "redis", Den: rawXReadGroups},
			{Label: "redis-batch/best-raw", Num: "redis-batch", Den: rawXReadGroups},
			{Label: "redis-inflight4x/best-raw", Num: "redis-inflight4x", Den: rawXReadGroups},
			{Label: "watermill/best-raw", Num: "watermill", Den: rawXReadGroups},
			{Label: "redis/raw-sequential", Num: "redis", Den: []string{"raw-xreadgroup"}},
			{Label: "raw-xreadgroup-pipelined-bare/best-raw", Num: "raw-xreadgroup-pipelined-bare", Den: rawXReadGroups},
			{Label: "raw-xreadgroup-concurrent-bare/best-raw", Num: "raw-xreadgroup-concurrent-bare", Den: rawXReadGroups},
			{Label: "raw-xreadgroup-bare/best-raw", Num: "raw-xreadgroup-bare", Den: rawXReadGroups},
			{Label: "redis/bare-raw", Num: "redis", Den: []string{"raw-xreadgroup-pipelined-bare", "raw-xreadgroup-concurrent-bare", "raw-xreadgroup-bare"}},
			{Label: "redis-publish/best-raw", Num: "redis-publish", Den: []string{"raw-xadd-pipe-envelope"}},
			{Label: "redis-publish/bare-raw", Num: "redis-publish", Den: []string{"raw-xadd-pipe"}},
			{Label: "redis-publish-fsync/best-raw", Num: "redis-publish-fsync", Den: []string{"raw-xadd-pipe-fsync"}},
			{Label: "fsync-cost/raw-publish", Num: "raw-xadd-pipe-fsync", Den: []string{"raw-xadd-pipe-envelope"}},
		},
	})
}

func setupRedis(ctx context.Context, _ Config) (Env, func(), error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Println("broker: REDIS_ADDR (durability none for every contender)")
		return Env{"addr": addr, "addr_fsync": addr, "fsync": "no"}, func() {}, nil
	}
	mem, err := redistest.Start(ctx, redistest.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("no REDIS_ADDR and no private redis-server could start: %w", err)
	}
	durable, err := redistest.Start(ctx, redistest.Options{Durable: true})
	if err != nil {
		_ = mem.Stop()
		return nil, nil, fmt.Errorf("no private durable redis-server could start: %w", err)
	}
	fmt.Println("broker: private redis-server 7.0 processes on 127.0.0.1 (no persistence; appendfsync always)")
	return Env{"addr": mem.Addr, "addr_fsync": durable.Addr, "fsync": "yes", brokerPIDEnv: fmt.Sprintf("%d,%d", mem.PID(), durable.PID())},
		func() { _ = mem.Stop(); _ = durable.Stop() }, nil
}

func redisNamespace(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
}

func openRedis(fsync bool) func(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	return func(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
		o := redis.Options{Addr: env["addr"], Namespace: redisNamespace("sluice"), Durability: redis.DurabilityNone, Logger: quiet}
		if fsync && env["fsync"] == "yes" {
			o.Addr, o.Durability = env["addr_fsync"], redis.DurabilityFsync
		}
		a, err := redis.New(ctx, o)
		if err != nil {
			return nil, ports.SubscriptionSpec{}, nil, err
		}
		return a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, func() { _ = a.Close(context.Background()) }, nil
	}
}

// prepareRedis creates the group (Subscribe, then Stop: the group outlives
// its consumers) and publishes N to the stream.
func prepareRedis(ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec, cfg Config) error {
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		return err
	}
	if err := sub.Stop(ctx); err != nil {
		return err
	}
	return prepublish(ctx, a, spec.Topic, cfg.N, 256, cfg.Payload)
}

// rawXAdd publishes messages 0..n-1 to stream from goroutines goroutines,
// in pipelines of chunk XADDs; values makes each message's fields (in the
// timed section).
func rawXAdd(ctx context.Context, rc *goredis.Client, stream string, n, goroutines, chunk int, values func(i int) any, done func(i int)) error {
	var next atomic.Int64
	errs := make(chan error, goroutines)
	for range goroutines {
		go func() {
			for {
				first := int(next.Add(int64(chunk))) - chunk
				if first >= n {
					errs <- nil
					return
				}
				last := min(first+chunk, n)
				pipe := rc.Pipeline()
				for i := first; i < last; i++ {
					pipe.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: values(i)})
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
				for i := first; i < last; i++ {
					done(i)
				}
			}
		}()
	}
	var first error
	for range goroutines {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rawXReadGroups are the raw consume contenders; the best is the
// denominator.
var rawXReadGroups = []string{"raw-xreadgroup-pipelined", "raw-xreadgroup-concurrent", "raw-xreadgroup"}

// rawXReadGroupStream makes a stream with a group and pre-publishes N
// entries to it: with envelope the fields the adapter writes
// (envelopeFields), else the payload alone.
func rawXReadGroupStream(ctx context.Context, rc *goredis.Client, name string, cfg Config, envelope bool) (string, error) {
	stream := redisNamespace(name)
	if err := rc.XGroupCreateMkStream(ctx, stream, "bench", "$").Err(); err != nil {
		return "", err
	}
	padding := pad(cfg.Payload)
	if err := rawXAdd(ctx, rc, stream, cfg.N, 1, 256, func(i int) any {
		if envelope {
			return envelopeFields(encodeMsg(i, padding), i)
		}
		return []any{"payload", encodeMsg(i, padding)}
	}, func(int) {}); err != nil {
		return "", fmt.Errorf("pre-publish: %w", err)
	}
	return stream, nil
}

// envelopeFields is the entry the adapter writes for benchMessage i with
// body as its payload: the payload and one "h:" field per envelope header
// (a fresh id per message).
func envelopeFields(body []byte, _ int) []any {
	return []any{"payload", body, "h:" + ports.HeaderContentType, "application/json", "h:" + ports.HeaderID, ports.NewID()}
}

// bareName is name, with "-bare" when the entries are bare.
func bareName(name string, envelope bool) string {
	if envelope {
		return name
	}
	return name + "-bare"
}

// bareEntries is note, saying so when the entries are bare.
func bareEntries(note string, envelope bool) string {
	if envelope {
		return note
	}
	return note + ", bare entries"
}

// handleEntries handles the entries of an XREADGROUP answer, returning
// their ids and bench indexes.
func handleEntries(res []goredis.XStream) (ids []string, idx []int, err error) {
	for _, st := range res {
		for _, e := range st.Messages {
			body, _ := e.Values["payload"].(string)
			i, err := handleJSON([]byte(body))
			if err != nil {
				return nil, nil, err
			}
			ids = append(ids, e.ID)
			idx = append(idx, i)
		}
	}
	return ids, idx, nil
}

// runRawXReadGroupPipelined acks the entries read last in the same
// pipeline as the next XREADGROUP: one round trip per batch.
func runRawXReadGroupPipelined(envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return rawXReadGroupPipelined(ctx, env, cfg, envelope)
	}
}

func rawXReadGroupPipelined(ctx context.Context, env Env, cfg Config, envelope bool) (Result, error) {
	name := bareName("raw-xreadgroup-pipelined", envelope)
	rc := goredis.NewClient(&goredis.Options{Addr: env["addr"]})
	defer rc.Close()
	stream, err := rawXReadGroupStream(ctx, rc, name, cfg, envelope)
	defer rc.Del(context.Background(), stream)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	var pendingIDs []string
	var pendingIdx []int
	for acked := 0; acked < cfg.N; {
		var read *goredis.XStreamSliceCmd
		var ack *goredis.IntCmd
		_, err := rc.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if len(pendingIDs) > 0 {
				ack = p.XAck(ctx, stream, "bench", pendingIDs...)
			}
			if acked+len(pendingIDs) < cfg.N {
				read = p.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "bench", Consumer: "c", Streams: []string{stream, ">"},
					Count: int64(cfg.InFlight), Block: 100 * time.Millisecond})
			}
			return nil
		})
		if err != nil && !errors.Is(err, goredis.Nil) {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		if ack != nil {
			if err := ack.Err(); err != nil {
				return Result{}, fmt.Errorf("%s: XACK: %w", name, err)
			}
			for _, i := range pendingIdx {
				tl.mark(i)
			}
			acked += len(pendingIDs)
		}
		pendingIDs, pendingIdx = nil, nil
		if read == nil {
			continue
		}
		res, err := read.Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		m.begin()
		if pendingIDs, pendingIdx, err = handleEntries(res); err != nil {
			return Result{}, err
		}
	}
	return finishNote(m, name, bareEntries(fmt.Sprintf("go-redis: XACK of the last read and XREADGROUP COUNT %d in one pipeline per round trip", cfg.InFlight), envelope))
}

// runRawXReadGroupConcurrent runs consumers of the group at once, each
// reading in-flight/consumers entries and acking what it read.
func runRawXReadGroupConcurrent(consumers int, envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		name := bareName("raw-xreadgroup-concurrent", envelope)
		rc := goredis.NewClient(&goredis.Options{Addr: env["addr"], PoolSize: consumers + 1})
		defer rc.Close()
		stream, err := rawXReadGroupStream(ctx, rc, name, cfg, envelope)
		defer rc.Del(context.Background(), stream)
		if err != nil {
			return Result{}, err
		}
		tl := newTally(cfg.N)
		m := newMeter(tl)
		var acked atomic.Int64
		errs := make(chan error, consumers)
		for c := range consumers {
			go func() {
				errs <- func() error {
					for acked.Load() < int64(cfg.N) {
						res, err := rc.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "bench", Consumer: "c" + strconv.Itoa(c), Streams: []string{stream, ">"},
							Count: int64(max(cfg.InFlight/consumers, 1)), Block: 100 * time.Millisecond}).Result()
						if errors.Is(err, goredis.Nil) {
							continue
						}
						if err != nil {
							return err
						}
						m.begin()
						ids, idx, err := handleEntries(res)
						if err != nil {
							return err
						}
						if err := rc.XAck(ctx, stream, "bench", ids...).Err(); err != nil {
							return fmt.Errorf("XACK: %w", err)
						}
						for _, i := range idx {
							tl.mark(i)
						}
						acked.Add(int64(len(ids)))
					}
					return nil
				}()
			}()
		}
		var first error
		for range consumers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return Result{}, fmt.Errorf("%s: %w", name, first)
		}
		return finishNote(m, name, bareEntries(fmt.Sprintf("go-redis: %d consumers × XREADGROUP COUNT %d, one XACK per read, concurrently", consumers, max(cfg.InFlight/consumers, 1)), envelope))
	}
}

func runRawXReadGroup(envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return rawXReadGroup(ctx, env, cfg, envelope)
	}
}

func rawXReadGroup(ctx context.Context, env Env, cfg Config, envelope bool) (Result, error) {
	name := bareName("raw-xreadgroup", envelope)
	rc := goredis.NewClient(&goredis.Options{Addr: env["addr"]})
	defer rc.Close()
	stream, err := rawXReadGroupStream(ctx, rc, name, cfg, envelope)
	defer rc.Del(context.Background(), stream)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	received := 0
	ids := make([]string, 0, cfg.InFlight)
	for received < cfg.N {
		res, err := rc.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "bench", Consumer: "c", Streams: []string{stream, ">"},
			Count: int64(cfg.InFlight), Block: 100 * time.Millisecond}).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		m.begin()
		ids = ids[:0]
		var idx []int
		for _, st := range res {
			for _, e := range st.Messages {
				body, _ := e.Values["payload"].(string)
				i, err := handleJSON([]byte(body))
				if err != nil {
					return Result{}, err
				}
				ids = append(ids, e.ID)
				idx = append(idx, i)
			}
		}
		if err := rc.XAck(ctx, stream, "bench", ids...).Err(); err != nil {
			return Result{}, fmt.Errorf("%s: XACK: %w", name, err)
		}
		for _, i := range idx {
			tl.mark(i)
		}
		received += len(ids)
	}
	return finishNote(m, name, bareEntries(fmt.Sprintf("go-redis: XREADGROUP COUNT %d, one XACK per read", cfg.InFlight), envelope))
}

func runRawXAdd(addrKey, name string, envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		rc := goredis.NewClient(&goredis.Options{Addr: env[addrKey], PoolSize: 32})
		defer rc.Close()
		stream := redisNamespace(name)
		defer rc.Del(context.Background(), stream)
		padding := pad(cfg.Payload)
		tl := newTally(cfg.N)
		m := newMeter(tl)
		m.begin()
		if err := rawXAdd(ctx, rc, stream, cfg.N, 16, 16, func(i int) any {
			if envelope { // the entry the adapter writes for benchMessage i, a fresh id and time each
				return envelopeFields(encodeMsg(i, padding), i)
			}
			return []any{"payload", encodeMsg(i, padding)}
		}, tl.mark); err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		note := "go-redis: 16 goroutines × pipelines of 16 XADD, the adapter's fields"
		if !envelope {
			note = "go-redis: 16 goroutines × pipelines of 16 XADD, bare entries"
		}
		res, err := finishNote(m, name, note)
		if err != nil {
			return Result{}, err
		}
		return res, checkStreamLen(ctx, rc, stream, cfg.N)
	}
}

func checkStreamLen(ctx context.Context, rc *goredis.Client, stream string, n int) error {
	got, err := rc.XLen(ctx, stream).Result()
	if err != nil {
		return err
	}
	if got != int64(n) {
		return fmt.Errorf("stream %s has %d entries, want %d: the contender is broken, its figure is void", stream, got, n)
	}
	return nil
}

func runRedisPublish(addrKey, name string, dur redis.Durability) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		if env["fsync"] != "yes" {
			dur = redis.DurabilityNone
		}
		ns := redisNamespace("sluicepub")
		a, err := redis.New(ctx, redis.Options{Addr: env[addrKey], Namespace: ns, Durability: dur, Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		defer a.Close(context.Background())
		const goroutines, chunk = 16, 16
		tl := newTally(cfg.N)
		m := newMeter(tl)
		m.begin()
		if err := produce(ctx, a, "bench", cfg.N, goroutines, chunk, cfg.Payload, 0, tl.mark); err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		res, err := finishNote(m, name, fmt.Sprintf("Adapter.Send (durability %v): %d goroutines × %d messages per Send", dur, goroutines, chunk))
		if err != nil {
			return Result{}, err
		}
		rc := goredis.NewClient(&goredis.Options{Addr: env[addrKey]})
		defer rc.Close()
		stream := ns + ":stream:bench"
		defer rc.Del(context.Background(), stream)
		return res, checkStreamLen(ctx, rc, stream, cfg.N)
	}
}

// runRedisWatermill is a Watermill router over watermill-redisstream's
// subscriber (its defaults: one consumer, ack = XACK per message); N
// entries are pre-published in its wire format with pipelined XADDs.
func runRedisWatermill(ctx context.Context, env Env, cfg Config) (Result, error) {
	topic := redisNamespace("watermill")
	logger := watermill.NopLogger{}
	rc := goredis.NewClient(&goredis.Options{Addr: env["addr"]})
	defer rc.Close()
	defer rc.Del(context.Background(), topic)
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: goredis.NewClient(&goredis.Options{Addr: env["addr"]}), ConsumerGroup: "bench", OldestId: "0",
	}, logger)
	if err != nil {
		return Result{}, err
	}
	defer sub.Close()
	padding := pad(cfg.Payload)
	var merr error
	if err := rawXAdd(ctx, rc, topic, cfg.N, 1, 256, func(i int) any {
		v, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal(topic, message.NewMessage(watermill.NewUUID(), encodeMsg(i, padding)))
		if err != nil {
			merr = err
		}
		return v
	}, func(int) {}); err != nil || merr != nil {
		return Result{}, fmt.Errorf("pre-publish: %v %v", err, merr)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	router.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		m.begin()
		i, err := handleJSON(msg.Payload)
		if err != nil {
			return err
		}
		tl.mark(i)
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(rctx) }()
	defer func() { _ = router.Close(); <-ran }()
	if err := tl.wait(ctx, "watermill"); err != nil {
		return Result{}, err
	}
	return finishNote(m, "watermill", "Router over watermill-redisstream subscriber (defaults), XACK per message")
}
