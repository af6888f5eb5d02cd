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

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Redis Streams adapter. It is safe for concurrent use.
type Adapter struct {
	o  Options
	rc *goredis.Client

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	subs    map[*subscription]struct{}
	streams map[string]struct{} // streams subscribed to, for the janitor
}

var _ ports.Adapter = (*Adapter)(nil)

// New connects to Redis, checks the durability level against the server
// and starts the delayed-message mover and the broadcast janitor.
func New(ctx context.Context, o Options) (*Adapter, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	rc := o.client()
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := rc.Ping(dctx).Err(); err != nil {
		_ = rc.Close()
		if err := explainConnect(o.TLS != nil, o.Addr, err); errors.Is(err, adapters.ErrTLS) || errors.Is(err, adapters.ErrAuth) {
			return nil, fmt.Errorf("redis: connect to %s: %w", o.Addr, err)
		}
		return nil, fmt.Errorf("redis: connect to %s: %w (is redis-server running there and reachable? check the address, TLS and the ACL user)", o.Addr, err)
	}
	if o.Durability == DurabilityFsync {
		if err := checkFsync(dctx, rc); err != nil {
			_ = rc.Close()
			return nil, fmt.Errorf("redis: %s: %w", o.Addr, err)
		}
	}
	a := &Adapter{o: o, rc: rc, subs: map[*subscription]struct{}{}, streams: map[string]struct{}{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.wg.Add(2)
	go a.moveLoop()
	go a.janitorLoop()
	return a, nil
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

// Name is "redis".
func (a *Adapter) Name() string { return "redis" }

// Capabilities: see the package documentation for how each is served.
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       true,
		NativeDeadLetter:     false,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          true,
		SubscriptionExpiry:   true,
		DurableGroups:        true,
		ExactRedeliveryCount: true,
		Ordering:             ports.OrderNone,
	}
}

func (a *Adapter) streamKey(t ports.Topic) string {
	if a.o.RawStreamNames {
		return string(t)
	}
	return a.o.Namespace + ":stream:" + string(t)
}
func (a *Adapter) delayedKey() string    { return a.o.Namespace + ":delayed" }
func (a *Adapter) delayedMsgKey() string { return a.o.Namespace + ":delayed:" + ports.NewID() }
func (a *Adapter) heartbeatKey(stream, group string) string {
	return a.o.Namespace + ":hb:" + stream + ":" + group
}

// broadcastPrefix marks the per-instance groups the janitor may destroy.
const broadcastPrefix = "bc:"

// Send publishes msgs with pipelined XADDs (a delayed message goes to the
// delayed set instead) and returns once Redis answered every one, plus the
// WAIT of DurabilityReplicas.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	var errs []error
	now := time.Now()
	type pending struct {
		i   int
		cmd goredis.Cmder
	}
	var sent []pending
	pipe := a.rc.Pipeline()
	for i := range msgs {
		m := msgs[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		m.Stamp(now)
		if f := a.o.faults; f != nil && f.failSend.Load() {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: fmt.Errorf("%w: fault injected", ports.ErrUnconfirmed)})
			continue
		}
		stream := a.streamKey(m.Topic)
		fields := encodeFor(a.o.Wire, &m)
		var cmd goredis.Cmder
		if m.Delay > 0 {
			args := append([]any{m.Delay.Milliseconds(), stream}, fields...)
			cmd = delayAddScript.Eval(ctx, pipe, []string{a.delayedMsgKey(), a.delayedKey()}, args...)
		} else {
			cmd = pipe.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: fields})
		}
		sent = append(sent, pending{i, cmd})
	}
	var wait *goredis.Cmd
	if len(sent) > 0 && a.o.Durability == DurabilityReplicas {
		// WAIT on the pipeline's connection counts the replicas that
		// acknowledged every write made on it so far.
		wait = pipe.Do(ctx, "WAIT", a.o.Replicas, a.o.WaitTimeout.Milliseconds())
	}
	if len(sent) > 0 {
		_, _ = pipe.Exec(ctx) // errors are per command below
	}
	var waitErr error
	if wait != nil {
		if n, err := wait.Int64(); err != nil {
			waitErr = fmt.Errorf("%w: WAIT %d replicas: %v", ports.ErrUnconfirmed, a.o.Replicas, err)
		} else if int(n) < a.o.Replicas {
			waitErr = fmt.Errorf("%w: WAIT: %d of %d replicas acknowledged within %v", ports.ErrUnconfirmed, n, a.o.Replicas, a.o.WaitTimeout)
		}
	}
	for _, p := range sent {
		err := p.cmd.Err()
		switch {
		case err != nil && ctx.Err() != nil:
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		case err != nil:
			err = fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		case waitErr != nil:
			err = waitErr
		}
		if err != nil {
			errs = append(errs, &ports.SendError{Index: p.i, Topic: msgs[p.i].Topic, Err: err})
		}
	}
	return errors.Join(errs...)
}

// Subscribe creates or joins the consumer group of spec and starts reading.
//
// LoadBalance: the group is spec.Group, created at the stream's end on
// first use and kept while no instance runs. Broadcast: the group is
// "bc:<group>:<instance>", one per instance, with a heartbeat key whose TTL
// is spec.InstanceTTL (default Options.InstanceTTL); see the package
// documentation for expiry.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if a.isClosed() {
		return nil, ports.ErrClosed
	}
	s := newSubscription(a, spec)
	if err := s.join(ctx); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.streams[s.stream] = struct{}{}
	a.mu.Unlock()
	s.start()
	return s, nil
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

func (a *Adapter) forget(s *subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

// Close stops every subscription and closes the connections.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.cancel()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	if err := a.rc.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// moveLoop moves due delayed messages into their streams. Every adapter
// runs it; the Lua mover is atomic, so several movers never duplicate.
func (a *Adapter) moveLoop() {
	defer a.wg.Done()
	t := time.NewTimer(a.o.DelayPoll)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		next := a.o.DelayPoll
		for range 100 { // bounded: at most 100 rounds of 256 per tick
			ms, err := moveScript.Run(a.ctx, a.rc, []string{a.delayedKey()}, 256).Int64()
			if err != nil {
				if a.ctx.Err() == nil {
					a.o.Logger.Warn("redis: moving delayed messages", "addr", a.o.Addr, "err", err)
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
func (a *Adapter) janitorLoop() {
	defer a.wg.Done()
	t := time.NewTicker(a.o.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		streams := make([]string, 0, len(a.streams))
		for s := range a.streams {
			streams = append(streams, s)
		}
		a.mu.Unlock()
		for _, st := range streams {
			a.expireGroups(a.ctx, st)
		}
	}
}

func (a *Adapter) expireGroups(ctx context.Context, stream string) {
	groups, err := a.rc.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return
	}
	for _, g := range groups {
		if !strings.HasPrefix(g.Name, broadcastPrefix) {
			continue
		}
		if err := expireScript.Run(ctx, a.rc, []string{stream, a.heartbeatKey(stream, g.Name)}, g.Name).Err(); err != nil && ctx.Err() == nil {
			a.o.Logger.Warn("redis: expiring broadcast group", "stream", stream, "group", g.Name, "err", err)
		}
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
