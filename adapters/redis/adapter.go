package redis

import (
	"context"
	"errors"
	"fmt"
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

// Adapter is the Redis Streams adapter: the portable layer
// (adapters/portable) over this package's driver. It is safe for
// concurrent use.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: one go-redis client.
type conn struct {
	o  Options
	rc *goredis.Client

	ctx    context.Context // cancelled by Close: the mover and the janitor
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	streams   map[string]struct{}  // streams subscribed to, for the janitor
	consumers map[string]struct{}  // stream/group/consumer of running subscriptions
	fields    map[string]*fieldRef // field/value entries held, by delivery id (fields.go)

	declared kit.Declared // topics declared with DeclareTopic
	specs    specCache    // trims of topics declared by other processes
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New connects to Redis, checks the durability level against the server
// and starts the delayed-message mover and the broadcast janitor. A
// failure to connect matches its portable code (ports.ErrRefused,
// ports.ErrAuth, ports.ErrTLS, …).
func New(ctx context.Context, o Options) (*Adapter, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	routeClientLog(o.Logger)
	c := &conn{o: o, rc: o.client(), streams: map[string]struct{}{}, consumers: map[string]struct{}{}, fields: map[string]*fieldRef{}}
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := c.rc.Ping(dctx).Err(); err != nil {
		_ = c.rc.Close()
		return nil, c.connectError(err)
	}
	if o.Durability == DurabilityFsync {
		if err := checkFsync(dctx, c.rc); err != nil {
			_ = c.rc.Close()
			return nil, fmt.Errorf("redis: %s: %w", o.Addr, err)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.moveLoop()
	go c.janitorLoop()
	var secrets []string
	if o.Password != "" {
		secrets = []string{o.Password}
	}
	return &Adapter{Adapter: portable.New(c, portable.Options{Logger: o.Logger, Secrets: secrets}), c: c}, nil
}

// checkFsync verifies appendonly yes and appendfsync always.
func checkFsync(ctx context.Context, rc *goredis.Client) error {
	for _, kv := range [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		key, want := kv[0], kv[1]
		m, err := rc.ConfigGet(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("durability fsync needs CONFIG GET %s to check the server's persistence: %w (allow CONFIG for this user, or choose durability=none or durability=replicas explicitly)", key, err)
		}
		if got := m[key]; got != want {
			return fmt.Errorf("durability fsync needs the server to run with %s %s, it runs with %s %q (set it in redis.conf, or choose durability=none or durability=replicas explicitly)", key, want, key, got)
		}
	}
	return nil
}

// Name is "redis". It works on the zero Adapter.
func (a *Adapter) Name() string { return (*conn)(nil).Name() }

// Capabilities: see the package documentation for how each is served. It
// works on the zero Adapter, for the capability matrix.
func (a *Adapter) Capabilities() ports.Capabilities {
	if a == nil || a.c == nil {
		return (*conn)(nil).Capabilities()
	}
	return a.c.Capabilities()
}

// Name is "redis".
func (c *conn) Name() string { return "redis" }

// Capabilities declares what Redis Streams do with this driver: delays
// in the delayed set, requeues in the pending entries list with an exact
// count, no dead-letter queue of its own (the portable layer's confirmed
// copy to "<topic>.dlq", then XACK).
func (c *conn) Capabilities() ports.Capabilities {
	max := DefaultMaxMessageBytes
	if c != nil && c.o.MaxMessageBytes > 0 {
		max = c.o.MaxMessageBytes
	}
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       true,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          true,
		SubscriptionExpiry:   true,
		DurableGroups:        true,
		ExactRedeliveryCount: true,
		Ordering:             ports.OrderNone,
		StartEarliest:        true,
		SingleActive:         true,
		Retention:            true,
		MaxLength:            true,
		MaxMessageBytes:      max,
		InstanceGuard:        ports.InstanceRefused, // a claim key (instance.go)
	}
}

func (c *conn) streamKey(t ports.Topic) string {
	if k, ok := c.o.Existing.stream(t); ok {
		return k
	}
	if c.o.RawStreamNames {
		return string(t)
	}
	return c.o.Namespace + ":stream:" + string(t)
}
func (c *conn) delayedKey() string    { return c.o.Namespace + ":delayed" }
func (c *conn) delayedMsgKey() string { return c.o.Namespace + ":delayed:" + ports.NewID() }
func (c *conn) heartbeatKey(stream, group string) string {
	return c.o.Namespace + ":hb:" + stream + ":" + group
}

// broadcastPrefix marks the per-instance groups the janitor may destroy.
const broadcastPrefix = "bc:"

// SendBatch publishes msgs with pipelined XADDs (a delayed message goes to
// the delayed set instead) and returns once Redis answered every one, plus
// the WAIT of DurabilityReplicas. A dead-letter copy of a field/value
// entry is written with the entry's original fields (fields.go).
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	now := time.Now()
	sent := make([]goredis.Cmder, len(msgs))
	pipe := c.rc.Pipeline()
	n := 0
	for i := range msgs {
		m := &msgs[i]
		if f := c.o.faults; f != nil && (f.failSend.Load() || f.failDL.Load() && strings.HasSuffix(string(m.Topic), ports.DeadLetterSuffix)) {
			fail(i, fmt.Errorf("%w: fault injected", ports.ErrUnconfirmed))
			continue
		}
		stream := c.streamKey(m.Topic)
		tr, err := c.trimFor(ctx, m.Topic, stream)
		if err != nil {
			fail(i, fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err))
			continue
		}
		fields := c.encodeSend(m)
		if m.Delay > 0 {
			args := append([]any{m.Delay.Milliseconds(), stream}, fields...)
			sent[i] = delayAddScript.Eval(ctx, pipe, []string{c.delayedMsgKey(), c.delayedKey()}, args...)
		} else {
			sent[i] = xadd(ctx, pipe, stream, fields, tr, now)
		}
		n++
	}
	if n == 0 {
		return errs
	}
	var wait *goredis.Cmd
	if c.o.Durability == DurabilityReplicas {
		// WAIT on the pipeline's connection counts the replicas that
		// acknowledged every write made on it so far.
		wait = pipe.Do(ctx, "WAIT", c.o.Replicas, c.o.WaitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // errors are per command below
	var waitErr error
	if wait != nil {
		if got, err := wait.Int64(); err != nil {
			waitErr = fmt.Errorf("%w: WAIT %d replicas: %w", ports.ErrUnconfirmed, c.o.Replicas, err)
		} else if int(got) < c.o.Replicas {
			waitErr = fmt.Errorf("%w: WAIT: %d of %d replicas acknowledged within %v", ports.ErrUnconfirmed, got, c.o.Replicas, c.o.WaitTimeout)
		}
	}
	for i, cmd := range sent {
		if cmd == nil {
			continue
		}
		switch err := cmd.Err(); {
		case err != nil && ctx.Err() != nil:
			fail(i, fmt.Errorf("%w (%w)", ctx.Err(), err))
		case err != nil:
			fail(i, fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err))
		case waitErr != nil:
			fail(i, waitErr)
		}
	}
	return errs
}

// Close stops the mover and the janitor and closes the client (the
// portable layer closed the subscriptions first).
func (c *conn) Close(ctx context.Context) error {
	unrouteClientLog(c.o.Logger)
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(append(errs, c.rc.Close())...)
}

// moveLoop moves due delayed messages into their streams. Every adapter
// runs it; the Lua mover is atomic, so several movers never duplicate.
func (c *conn) moveLoop() {
	defer c.wg.Done()
	t := time.NewTimer(c.o.DelayPoll)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		next := c.o.DelayPoll
		for range 100 { // bounded: at most 100 rounds of 256 per tick
			ms, err := moveScript.Run(c.ctx, c.rc, []string{c.delayedKey()}, 256).Int64()
			if err != nil {
				if c.ctx.Err() == nil {
					c.o.Logger.Warn("redis: moving delayed messages", "addr", c.o.Addr, "err", err)
				}
				break
			}
			if ms != 0 {
				if ms > 0 && time.Duration(ms)*time.Millisecond < next {
					next = max(time.Duration(ms)*time.Millisecond, time.Millisecond)
				}
				break
			}
		}
		t.Reset(next)
	}
}

// janitorLoop destroys the broadcast groups whose heartbeat expired, on
// every stream this adapter subscribed to.
func (c *conn) janitorLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.o.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		streams := make([]string, 0, len(c.streams))
		for s := range c.streams {
			streams = append(streams, s)
		}
		c.mu.Unlock()
		for _, st := range streams {
			c.expireGroups(c.ctx, st)
		}
	}
}

func (c *conn) expireGroups(ctx context.Context, stream string) {
	groups, err := c.rc.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return
	}
	for _, g := range groups {
		if !strings.HasPrefix(g.Name, broadcastPrefix) {
			continue
		}
		if err := expireScript.Run(ctx, c.rc, []string{stream, c.heartbeatKey(stream, g.Name)}, g.Name).Err(); err != nil && ctx.Err() == nil {
			c.o.Logger.Warn("redis: expiring broadcast group", "stream", stream, "group", g.Name, "err", err)
		}
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
