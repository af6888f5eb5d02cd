package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/ports"
)

// handle is a delivery's settlement handle: its stream entry and whether
// it was settled already.
type handle struct {
	id      string
	settled atomic.Bool
}

type subscription struct {
	a         *Adapter
	spec      ports.SubscriptionSpec
	stream    string
	group     string
	consumer  string
	broadcast bool
	hbKey     string
	hbTTL     time.Duration

	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	inbox   []*ports.Delivery
	held    map[string]struct{} // entry ids received and not settled (inbox + handed out)
	ready   chan struct{}       // signalled when inbox gains deliveries
	room    chan struct{}       // signalled when held shrinks
	stopped bool
	cursor  string

	errs     chan error
	dropped  atomic.Int64
	stopOnce sync.Once
	stopErr  error
	done     chan struct{}
}

func newSubscription(a *Adapter, spec ports.SubscriptionSpec) *subscription {
	s := &subscription{
		a: a, spec: spec, stream: a.streamKey(spec.Topic), group: spec.Group,
		consumer: "c-" + ports.NewID(),
		held:     map[string]struct{}{},
		ready:    make(chan struct{}, 1), room: make(chan struct{}, 1),
		errs: make(chan error, 64), done: make(chan struct{}), cursor: "0-0",
	}
	if spec.Mode == ports.Broadcast {
		s.broadcast = true
		inst := spec.Instance
		if inst == "" {
			inst = ports.NewID()
		}
		s.group = broadcastPrefix + spec.Group + ":" + inst
		s.hbKey = a.heartbeatKey(s.stream, s.group)
		s.hbTTL = spec.InstanceTTL
		if s.hbTTL <= 0 {
			s.hbTTL = a.o.InstanceTTL
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// join creates the group (idempotently) before Subscribe returns.
func (s *subscription) join(ctx context.Context) error {
	var err error
	if s.broadcast {
		err = joinScript.Run(ctx, s.a.rc, []string{s.stream, s.hbKey}, s.group, ms(s.hbTTL)).Err()
	} else {
		err = s.a.rc.XGroupCreateMkStream(ctx, s.stream, s.group, "$").Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("redis: create consumer group %q on %s: %w", s.group, s.stream, err)
	}
	return nil
}

func (s *subscription) start() {
	s.wg.Add(2)
	go s.readLoop()
	go s.leaseLoop()
}

func (s *subscription) report(err error) {
	select {
	case s.errs <- err:
	default:
		s.dropped.Add(1)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// free returns how many more entries may be read without exceeding InFlight.
func (s *subscription) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spec.InFlight - len(s.held)
}

// readLoop claims idle entries (crashed consumers', released and requeued
// ones) with XAUTOCLAIM every ClaimInterval and reads new entries with
// XREADGROUP in between, never holding more than InFlight.
func (s *subscription) readLoop() {
	defer s.wg.Done()
	o := s.a.o
	backoff := 50 * time.Millisecond
	var lastClaim time.Time
	for s.ctx.Err() == nil {
		n := s.free()
		if n <= 0 {
			select {
			case <-s.room:
			case <-s.ctx.Done():
			}
			continue
		}
		var ds []*ports.Delivery
		var err error
		if time.Since(lastClaim) >= o.ClaimInterval {
			lastClaim = time.Now()
			ds, err = s.claim(n)
		}
		if err == nil && len(ds) == 0 {
			ds, err = s.read(n, o.ClaimInterval)
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				// The group is gone (a server restarted without persistence,
				// or an expired broadcast group): create it again.
				err = fmt.Errorf("redis: consumer group %q on %s vanished, recreating it: %w", s.group, s.stream, err)
				if jerr := s.join(s.ctx); jerr != nil {
					err = errors.Join(err, jerr)
				}
			}
			s.report(err)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if len(ds) > 0 {
			s.push(ds)
		}
	}
}

func (s *subscription) push(ds []*ports.Delivery) {
	s.mu.Lock()
	for _, d := range ds {
		h := d.Handle.(*handle)
		if _, dup := s.held[h.id]; dup {
			continue // already held (claimed back from ourselves)
		}
		s.held[h.id] = struct{}{}
		s.inbox = append(s.inbox, d)
	}
	s.mu.Unlock()
	signal(s.ready)
}

func (s *subscription) claim(n int) ([]*ports.Delivery, error) {
	s.mu.Lock()
	cursor := s.cursor
	s.mu.Unlock()
	res, err := claimScript.Run(s.ctx, s.a.rc, []string{s.stream}, s.group, s.consumer, s.a.o.ClaimMinIdle.Milliseconds(), cursor, n).Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("redis: claim script returned %d values, want 3", len(res))
	}
	next, _ := res[0].(string)
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	s.mu.Lock()
	s.cursor = next
	s.mu.Unlock()
	now := time.Now()
	out := make([]*ports.Delivery, 0, len(entries))
	for i, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			continue
		}
		id, _ := pair[0].(string)
		flat, _ := pair[1].([]any)
		values := make(map[string]any, len(flat)/2)
		for j := 0; j+1 < len(flat); j += 2 {
			k, _ := flat[j].(string)
			values[k] = flat[j+1]
		}
		var count int64 = 1
		if i < len(counts) {
			count, _ = counts[i].(int64)
		}
		out = append(out, s.delivery(id, values, count, now))
	}
	return out, nil
}

func (s *subscription) read(n int, block time.Duration) ([]*ports.Delivery, error) {
	res, err := s.a.rc.XReadGroup(s.ctx, &goredis.XReadGroupArgs{
		Group: s.group, Consumer: s.consumer, Streams: []string{s.stream, ">"}, Count: int64(n), Block: block,
	}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []*ports.Delivery
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, s.delivery(m.ID, m.Values, 1, now))
		}
	}
	return out, nil
}

func (s *subscription) delivery(id string, values map[string]any, count int64, now time.Time) *ports.Delivery {
	d := decode(s.spec.Topic, s.stream, s.group, id, values, count)
	d.ReceivedAt = now
	d.Handle = &handle{id: id}
	return d
}

// leaseLoop renews the idle time of every held entry every ClaimMinIdle/3
// (so other consumers do not claim the work of a live, slow one) and the
// broadcast heartbeat every TTL/3.
func (s *subscription) leaseLoop() {
	defer s.wg.Done()
	lease := time.NewTicker(s.a.o.ClaimMinIdle / 3)
	defer lease.Stop()
	var hb <-chan time.Time
	if s.broadcast {
		t := time.NewTicker(max(s.hbTTL/3, 10*time.Millisecond))
		defer t.Stop()
		hb = t.C
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-hb:
			if err := s.a.rc.Set(s.ctx, s.hbKey, "1", s.hbTTL).Err(); err != nil && s.ctx.Err() == nil {
				s.report(fmt.Errorf("redis: renew heartbeat of broadcast instance %q: %w", s.group, err))
			}
		case <-lease.C:
			ids := s.heldIDs()
			for len(ids) > 0 {
				chunk := ids[:min(len(ids), 500)]
				ids = ids[len(chunk):]
				args := append([]any{s.group, s.consumer}, toAny(chunk)...)
				if err := renewScript.Run(s.ctx, s.a.rc, []string{s.stream}, args...).Err(); err != nil && s.ctx.Err() == nil {
					s.report(fmt.Errorf("redis: renew the lease of %d held entries: %w", len(chunk), err))
				}
			}
		}
	}
}

func (s *subscription) heldIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	return ids
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Receive returns up to max deliveries, blocking for at least one.
func (s *subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		max = 1
	}
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if len(s.inbox) > 0 {
			n := min(max, len(s.inbox))
			out := make([]*ports.Delivery, n)
			copy(out, s.inbox)
			s.inbox = s.inbox[n:]
			more := len(s.inbox) > 0
			s.mu.Unlock()
			if more {
				signal(s.ready)
			}
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Settle: see the package documentation for the mapping. Every action is
// done (answered by Redis) when Settle returns nil; nothing is deferred.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return ports.ErrClosed
	}
	if len(ds) == 0 {
		return nil
	}
	hs := make([]*handle, 0, len(ds))
	for _, d := range ds {
		h, ok := d.Handle.(*handle)
		if !ok {
			return fmt.Errorf("%w: delivery %q was not received by this redis adapter", ports.ErrInvalid, d.ID)
		}
		if h.settled.Load() {
			return fmt.Errorf("settle %q: %w", d.ID, ports.ErrAlreadyCompleted)
		}
		hs = append(hs, h)
	}
	var err error
	switch disp.Action {
	case ports.Ack:
		err = s.ack(ctx, hs)
	case ports.Requeue:
		err = s.requeue(ctx, ds, hs, disp.Delay)
	case ports.DeadLetter:
		err = s.deadLetter(ctx, ds, hs, disp)
	default:
		return fmt.Errorf("%w: unknown action %v", ports.ErrInvalid, disp.Action)
	}
	if err != nil {
		// The entries stay pending, unsettled. They leave the held set, so
		// their lease is no longer renewed: once idle for ClaimMinIdle an
		// XAUTOCLAIM (this consumer's or another's) hands them out again.
		s.release(hs, false)
		return fmt.Errorf("redis: %v %d entries of %s: %w", disp.Action, len(ds), s.stream, err)
	}
	s.release(hs, true)
	return nil
}

func (s *subscription) release(hs []*handle, settled bool) {
	s.mu.Lock()
	for _, h := range hs {
		if settled {
			h.settled.Store(true)
		}
		delete(s.held, h.id)
	}
	s.mu.Unlock()
	signal(s.room)
}

func ids(hs []*handle) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.id
	}
	return out
}

// ack is one XACK for the whole batch.
func (s *subscription) ack(ctx context.Context, hs []*handle) error {
	return s.a.rc.XAck(ctx, s.stream, s.group, ids(hs)...).Err()
}

// requeue leaves the entries pending and sets their idle time to
// ClaimMinIdle−delay (XCLAIM … IDLE … JUSTID, which does not count a
// delivery), so XAUTOCLAIM hands them out again after delay and counts the
// delivery. A delay of ClaimMinIdle or more goes through the delayed set
// instead: a copy with the redelivery count in its header is stored and the
// original acknowledged, in one atomic step.
func (s *subscription) requeue(ctx context.Context, ds []*ports.Delivery, hs []*handle, delay time.Duration) error {
	minIdle := s.a.o.ClaimMinIdle
	if delay < minIdle {
		return s.setIdle(ctx, ids(hs), minIdle-delay)
	}
	pipe := s.a.rc.Pipeline()
	for i, d := range ds {
		m := d.Message
		m.Headers = d.Headers.Clone()
		if m.Headers == nil {
			m.Headers = ports.Headers{}
		}
		m.Headers[ports.HeaderRedeliveryCount] = fmt.Sprint(d.RedeliveryCount + 1)
		args := append([]any{delay.Milliseconds(), s.stream, s.group, hs[i].id}, encode(&m)...)
		delayAddAckScript.Eval(ctx, pipe, []string{s.a.delayedMsgKey(), s.a.delayedKey(), s.stream}, args...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return c.Err()
			}
		}
		return err
	}
	return nil
}

// setIdle is XCLAIM <stream> <group> <self> 0 <ids…> IDLE <idle> JUSTID:
// the entries stay pending with this consumer, their delivery count
// unchanged, and become claimable by XAUTOCLAIM once ClaimMinIdle−idle has
// passed.
func (s *subscription) setIdle(ctx context.Context, ids []string, idle time.Duration) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 8+len(chunk))
		args = append(args, "XCLAIM", s.stream, s.group, s.consumer, 0)
		args = append(args, toAny(chunk)...)
		args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
		if err := s.a.rc.Do(ctx, args...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// deadLetter is MULTI { XADD <topic>.dlq …; XACK } for the batch: the
// dead-letter entries and the acknowledgements commit together or not at
// all.
func (s *subscription) deadLetter(ctx context.Context, ds []*ports.Delivery, hs []*handle, disp ports.Disposition) error {
	if f := s.a.o.faults; f != nil && f.failDL.Load() {
		return fmt.Errorf("%w: dead-letter publish failed (fault injected)", ports.ErrUnconfirmed)
	}
	dlq := s.a.streamKey(ports.DeadLetterTopic(s.spec.Topic))
	_, err := s.a.rc.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		for _, d := range ds {
			m := deadLetterCopy(d, disp)
			p.XAdd(ctx, &goredis.XAddArgs{Stream: dlq, Values: encode(&m)})
		}
		p.XAck(ctx, s.stream, s.group, ids(hs)...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: dead-letter to %s: %v", ports.ErrUnconfirmed, dlq, err)
	}
	return nil
}

func deadLetterCopy(d *ports.Delivery, disp ports.Disposition) ports.Message {
	m := ports.Message{Topic: ports.DeadLetterTopic(d.Topic), Key: d.Key, Payload: d.Payload, Headers: d.Headers.Clone()}
	if m.Headers == nil {
		m.Headers = ports.Headers{}
	}
	delete(m.Headers, ports.HeaderRedeliveryCount)
	m.Headers[ports.HeaderDeadLetterReason] = disp.ReasonText()
	m.Headers[ports.HeaderDeadLetterTopic] = string(d.Topic)
	attempts := disp.Attempts
	if attempts <= 0 {
		attempts = d.RedeliveryCount + 1
	}
	m.Headers[ports.HeaderAttempts] = fmt.Sprint(attempts)
	return m
}

// Stop stops reading and hands every held entry back to the group: their
// idle time is set to ClaimMinIdle, so the next XAUTOCLAIM of any consumer
// of the group takes them (nothing is acknowledged). A Broadcast instance
// whose InstanceTTL is zero destroys its group; one with a TTL leaves its
// heartbeat to expire after the TTL.
func (s *subscription) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.cancel()
		close(s.done)
		waited := make(chan struct{})
		go func() { s.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
			s.stopErr = fmt.Errorf("redis: stop %s: %w", s.stream, ctx.Err())
		}
		var errs []error
		if ids := s.heldIDs(); len(ids) > 0 {
			if err := s.setIdle(ctx, ids, s.a.o.ClaimMinIdle); err != nil {
				errs = append(errs, fmt.Errorf("release %d held entries (they are claimed after ClaimMinIdle instead): %w", len(ids), err))
			}
		}
		switch {
		case s.broadcast && s.spec.InstanceTTL <= 0:
			if err := s.a.rc.XGroupDestroy(ctx, s.stream, s.group).Err(); err != nil {
				errs = append(errs, err)
			}
			s.a.rc.Del(ctx, s.hbKey)
		case s.broadcast:
			if err := s.a.rc.Set(ctx, s.hbKey, "1", s.hbTTL).Err(); err != nil {
				errs = append(errs, err)
			}
			fallthrough
		default:
			_ = leaveScript.Run(ctx, s.a.rc, []string{s.stream}, s.group, s.consumer).Err()
		}
		if len(errs) > 0 && s.stopErr == nil {
			s.stopErr = fmt.Errorf("redis: stop %s: %w", s.stream, errors.Join(errs...))
		}
		s.a.forget(s)
		close(s.errs)
	})
	return s.stopErr
}

// Errors reports asynchronous errors; closed after Stop.
func (s *subscription) Errors() <-chan error { return s.errs }
