package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Redis Streams adapter, safe for concurrent use.
type Adapter struct{ *portable.Adapter }

// conn is the driver: one go-redis client.
type conn struct {
	o        Options
	rc       *goredis.Client
	declared kit.Declared         // topics declared by this adapter
	fields   kit.Originals[[]any] // the fields of the field/value entries held, by identity (codec.go)
	specs    sync.Map             // stream → the trim declared by another process (topics.go)
	timers   *kit.Periodic        // the delayed-message mover and the broadcast janitor

	mu        sync.Mutex
	streams   map[string]struct{} // streams subscribed to, for the janitor
	consumers map[string]struct{} // stream, group and consumer of each subscription
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New connects to Redis, checks the durability level against the server
// and starts the delayed-message mover and the broadcast janitor. A
// failed connection matches its portable code (ports.ErrAuth, …).
func New(ctx context.Context, o Options) (*Adapter, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	clientLog.Use(o.Logger, func() { goredis.SetLogger(clientLog) })
	c := &conn{o: o, rc: o.client(), streams: map[string]struct{}{}, consumers: map[string]struct{}{}}
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	err := c.rc.Ping(dctx).Err()
	if err != nil {
		err = c.connectError(err)
	} else if o.Durability == DurabilityFsync {
		err = checkFsync(dctx, c.rc, o.Addr)
	}
	if err != nil {
		_ = c.rc.Close()
		return nil, err
	}
	c.timers = kit.NewPeriodic()
	c.timers.Every(o.DelayPoll, c.moveDelayed)
	c.timers.Every(o.JanitorInterval, c.expireGroups)
	return &Adapter{portable.New(c, portable.Options{Logger: o.Logger, Secrets: []string{o.Password}})}, nil
}

// checkFsync verifies appendonly yes and appendfsync always.
func checkFsync(ctx context.Context, rc *goredis.Client, addr string) error {
	for _, kv := range [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		key, want := kv[0], kv[1]
		m, err := rc.ConfigGet(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("redis: %s: durability fsync needs CONFIG GET %s to check the server's persistence: %w (allow CONFIG for this user, or choose durability=none or durability=replicas explicitly)", addr, key, err)
		}
		if got := m[key]; got != want {
			return fmt.Errorf("redis: %s: durability fsync needs the server to run with %s %s, it runs with %s %q (set it in redis.conf, or choose durability=none or durability=replicas explicitly)", addr, key, want, key, got)
		}
	}
	return nil
}

// Capabilities are what Redis Streams does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

func (c *conn) Name() string { return "redis" }

// Capabilities: delays in the delayed set, requeues in the pending list
// with an exact count; dead letters are the portable layer's copies.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage: true, Broadcast: true, PerMessageAck: true, CompetingConsumers: true, PublisherConfirm: true, NativeBatch: true,
		SubscriptionExpiry: true, DurableGroups: true, ExactRedeliveryCount: true, Ordering: ports.OrderNone,
		StartEarliest: true, SingleActive: true, Retention: true, MaxLength: true,
		MaxMessageBytes: cmp.Or(c.o.MaxMessageBytes, DefaultMaxMessageBytes),
		InstanceGuard:   ports.InstanceRefused, // a claim key (lease.go)
	}
}

func (c *conn) streamKey(t ports.Topic) string {
	if k, ok := c.o.Existing.Streams[t]; ok {
		return k
	}
	if c.o.RawStreamNames {
		return string(t)
	}
	return c.o.Namespace + ":stream:" + string(t)
}

func (c *conn) delayedKey() string { return c.o.Namespace + ":delayed" }

func (c *conn) heartbeatKey(stream, group string) string {
	return c.o.Namespace + ":hb:" + stream + ":" + group
}

// broadcastPrefix marks the per-instance groups the janitor may destroy.
const broadcastPrefix = "bc:"

// SendBatch pipelines the XADDs (a delayed message into the delayed set)
// and the WAIT of DurabilityReplicas.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	errs, cmds := make([]error, len(msgs)), make([]goredis.Cmder, len(msgs))
	pipe, now := c.rc.Pipeline(), time.Now()
	for i, j := 0, 0; i < len(msgs); i = j { // by runs of one topic: its stream and trimming looked up once
		t, stream := msgs[i].Topic, c.streamKey(msgs[i].Topic)
		tr, err := c.trimFor(ctx, t, stream)
		for key := any(stream); j < len(msgs) && msgs[j].Topic == t; j++ {
			m := &msgs[j]
			switch {
			case c.o.faults != nil && c.o.faults.refuse(m.Topic):
				errs[j] = fmt.Errorf("%w: fault injected", ports.ErrUnconfirmed)
			case err != nil:
				errs[j] = fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
			case m.Delay > 0:
				cmds[j] = delayAddScript.Eval(ctx, pipe, []string{c.delayedKey() + ":" + ports.NewID(), c.delayedKey()}, c.encodeSend(m, m.Delay.Milliseconds(), key)...)
			default:
				cmds[j] = c.xadd(ctx, pipe, key, m, tr, now)
			}
		}
	}
	if pipe.Len() == 0 {
		return errs
	}
	var wait *goredis.Cmd
	if c.o.Durability == DurabilityReplicas { // WAIT counts the replicas that have every write of its connection
		wait = pipe.Do(ctx, "WAIT", c.o.Replicas, c.o.WaitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // errors are per command below
	var waitErr error
	if wait != nil {
		if got, err := wait.Int64(); err != nil || int(got) < c.o.Replicas {
			waitErr = fmt.Errorf("%w: WAIT: %d of %d replicas acknowledged within %v (%v)", ports.ErrUnconfirmed, got, c.o.Replicas, c.o.WaitTimeout, err)
		}
	}
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = waitErr
			if err := cmd.Err(); err != nil {
				errs[i] = fmt.Errorf("%w: %w", cmp.Or(ctx.Err(), ports.ErrUnconfirmed), err)
			}
		}
	}
	return errs
}

// Close stops the mover and the janitor and closes the client.
func (c *conn) Close(ctx context.Context) error {
	clientLog.Done(c.o.Logger)
	return errors.Join(c.timers.Stop(ctx), c.rc.Close())
}

// moveDelayed moves due delayed messages into their streams (at most 100
// rounds of 256; atomic, so concurrent movers never duplicate) and
// returns how soon the next is due (0: not known).
func (c *conn) moveDelayed(ctx context.Context) time.Duration {
	for range 100 {
		ms, err := moveScript.Run(ctx, c.rc, []string{c.delayedKey()}, 256).Int64()
		if err != nil && ctx.Err() == nil {
			c.o.Logger.Warn("sluice redis: moving delayed messages", "addr", c.o.Addr, "err", err)
		}
		if err != nil || ms != 0 { // ms < 0: none left
			return time.Duration(max(ms, 0)) * time.Millisecond
		}
	}
	return time.Millisecond
}

// expireGroups destroys the expired broadcast groups of the streams
// subscribed to.
func (c *conn) expireGroups(ctx context.Context) time.Duration {
	c.mu.Lock()
	streams := slices.Collect(maps.Keys(c.streams))
	c.mu.Unlock()
	for _, stream := range streams {
		groups, _ := c.rc.XInfoGroups(ctx, stream).Result()
		for _, g := range groups {
			if !strings.HasPrefix(g.Name, broadcastPrefix) {
				continue
			}
			if err := expireScript.Run(ctx, c.rc, []string{stream, c.heartbeatKey(stream, g.Name)}, g.Name).Err(); err != nil && ctx.Err() == nil {
				c.o.Logger.Warn("sluice redis: expiring broadcast group", "stream", stream, "group", g.Name, "err", err)
			}
		}
	}
	return 0
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
