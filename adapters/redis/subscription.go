package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// handle is a delivery's settlement handle: its stream entry and its
// settlement claim (kit.Tracker's state).
type handle struct {
	id    string
	claim kit.Claim
	// fields are the data fields of a plain producer's field/value entry
	// (nil for sluice's and watermill's formats): its requeue and
	// dead-letter copies are written with them, byte for byte.
	fields []any
}

// encodeCopy returns the XADD field/value list of a requeue or
// dead-letter copy m of the entry behind h.
func (s *subscription) encodeCopy(h *handle, m *ports.Message) []any {
	if h.fields != nil {
		return encodeFields(h.fields, m)
	}
	return encodeFor(s.a.o.Wire, m)
}

// Claim implements kit.Claimer.
func (h *handle) Claim() *kit.Claim { return &h.claim }

type subscription struct {
	a         *Adapter
	spec      ports.SubscriptionSpec
	stream    string
	group     string
	consumer  string
	broadcast bool
	hbKey     string
	hbTTL     time.Duration
	instance  *instanceClaim // a Broadcast instance's claim (instance.go)

	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	inbox   *kit.Inbox[*ports.Delivery]
	errs    *kit.Errors
	settler *kit.Settler

	mu      sync.Mutex
	held    map[string]struct{} // entry ids received and not settled (inbox + handed out)
	loose   map[string]struct{} // entry ids whose settlement failed: pending, not renewed
	room    chan struct{}       // signalled when held shrinks
	stopped bool
	cursor  string

	stopOnce sync.Once
	stopErr  error

	single *lease // SingleActive: read only while holding it
}

func newSubscription(a *Adapter, spec ports.SubscriptionSpec) *subscription {
	group := spec.Group
	if n, ok := a.o.Existing.group(spec.Topic, spec.Group); ok && spec.Mode == ports.LoadBalance {
		group = n
	}
	s := &subscription{
		a: a, spec: spec, stream: a.streamKey(spec.Topic), group: group,
		consumer: "c-" + ports.NewID(),
		held:     map[string]struct{}{}, loose: map[string]struct{}{}, room: make(chan struct{}, 1), cursor: "0-0",
		inbox: kit.NewInbox[*ports.Delivery](0), errs: kit.NewErrors(64),
	}
	s.settler = kit.NewSettler(settleBroker{s})
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
	if spec.SingleActive {
		s.single = newLease(s)
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
		// A new group starts at the stream's end ($), or at its first
		// entry (0) for StartEarliest; an existing one keeps its position.
		at := "$"
		if s.spec.Start == ports.StartEarliest {
			at = "0"
		}
		if _, adopted := s.a.o.Existing.stream(s.spec.Topic); adopted {
			err = s.a.rc.XGroupCreate(ctx, s.stream, s.group, at).Err() // never creates an adopted stream
		} else {
			err = s.a.rc.XGroupCreateMkStream(ctx, s.stream, s.group, at).Err()
		}
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
	if s.single != nil {
		s.single.try(s.ctx)
		s.wg.Add(1)
		go s.single.run(s.ctx)
	}
	go s.readLoop()
	go s.leaseLoop()
	s.instance.start()
}

func (s *subscription) report(err error) { s.errs.Report(err) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// refillLinger bounds how long the read loop waits for half the in-flight
// window to be free before it reads what is free.
const refillLinger = 2 * time.Millisecond

// free returns how many more entries may be read without exceeding
// InFlight, and how many are held.
func (s *subscription) free() (n, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spec.InFlight - len(s.held), len(s.held)
}

// readLoop claims idle entries (crashed consumers', released and requeued
// ones) with XAUTOCLAIM every ClaimInterval and reads new entries with
// XREADGROUP in between, never holding more than InFlight.
func (s *subscription) readLoop() {
	defer s.wg.Done()
	o := s.a.o
	policy := kit.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	failures := 0
	var lastClaim time.Time
	// Refill in large reads: while less than half the in-flight window is
	// free and something is held, wait up to refillLinger for more room —
	// one XREADGROUP per half window under load, not one per Settle — then
	// read what is free (handlers that hold their deliveries must still
	// get the rest of the window).
	refill := max(1, s.spec.InFlight/2)
	linger := time.NewTimer(0)
	defer linger.Stop()
	for s.ctx.Err() == nil {
		if s.single != nil && !s.single.wait(s.ctx) {
			return
		}
		n, held := s.free()
		if n <= 0 {
			select {
			case <-s.room:
			case <-s.ctx.Done():
			}
			continue
		}
		if n < refill && held > 0 {
			linger.Reset(refillLinger)
		wait:
			for n < refill {
				select {
				case <-s.room:
					n, _ = s.free()
				case <-linger.C:
					break wait
				case <-s.ctx.Done():
					return
				}
			}
			linger.Stop()
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
			t := time.NewTimer(policy.Delay(failures))
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
			failures++
			continue
		}
		failures = 0
		if len(ds) > 0 {
			s.push(ds)
		}
	}
}

func (s *subscription) push(ds []*ports.Delivery) {
	fresh := ds[:0]
	s.mu.Lock()
	for _, d := range ds {
		h := d.Handle.(*handle)
		if _, dup := s.held[h.id]; dup {
			continue // already held (claimed back from ourselves)
		}
		s.held[h.id] = struct{}{}
		delete(s.loose, h.id)
		fresh = append(fresh, d)
	}
	s.mu.Unlock()
	// Unbounded inbox: held already bounds it by InFlight. After Stop the
	// entries stay pending and Stop releases every held one.
	_ = s.inbox.Push(context.Background(), fresh...)
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
	d, fields := decode(s.spec.Topic, s.stream, s.group, id, values, count)
	d.ReceivedAt = now
	d.Handle = &handle{id: id, fields: fields}
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
	return s.inbox.Receive(ctx, max)
}

// Settle: see the package documentation for the mapping. Every action is
// done (answered by Redis) when Settle returns nil; nothing is deferred.
// kit.Settler carries it out with this adapter's native requeue and dead
// letter (settleBroker); its Tracker refuses a second settlement.
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
		hs = append(hs, h)
	}
	err := s.settler.Settle(ctx, ds, disp)
	switch {
	case errors.Is(err, ports.ErrAlreadyCompleted), errors.Is(err, ports.ErrConflict), errors.Is(err, ports.ErrInvalid):
		return err
	case err != nil:
		// The entries stay pending, unsettled. They leave the held set, so
		// their lease is no longer renewed: once idle for ClaimMinIdle an
		// XAUTOCLAIM (this consumer's or another's) hands them out again,
		// paced by ClaimMinIdle; Stop hands them back at once.
		s.release(hs)
		s.mu.Lock()
		for _, h := range hs {
			s.loose[h.id] = struct{}{}
		}
		s.mu.Unlock()
		return fmt.Errorf("redis: %v %d entries of %s: %w", disp.Action, len(ds), s.stream, err)
	}
	s.release(hs)
	return nil
}

// settleBroker is the kit.Broker of a subscription, with Redis' native
// requeue (idle shaping) and dead letter (MULTI).
type settleBroker struct{ s *subscription }

var (
	_ kit.NativeRequeue    = settleBroker{}
	_ kit.NativeDeadLetter = settleBroker{}
)

func (b settleBroker) Ack(ctx context.Context, ds []*ports.Delivery) error {
	return b.s.ack(ctx, handles(ds))
}

// Publish is the confirmed Send (the Settler uses it only for brokers
// without the native interfaces; kept for completeness).
func (b settleBroker) Publish(ctx context.Context, msgs []ports.Message) []error {
	err := b.s.a.Send(ctx, msgs...)
	if err == nil {
		return nil
	}
	errs := make([]error, len(msgs))
	var se *ports.SendError
	for _, e := range unjoin(err) {
		if errors.As(e, &se) && se.Index < len(errs) {
			errs[se.Index] = e
		}
	}
	return errs
}

func (b settleBroker) Requeue(ctx context.Context, ds []*ports.Delivery, delay time.Duration) error {
	return b.s.requeue(ctx, ds, handles(ds), delay)
}

func (b settleBroker) DeadLetter(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	return b.s.deadLetter(ctx, ds, handles(ds), disp)
}

func handles(ds []*ports.Delivery) []*handle {
	hs := make([]*handle, len(ds))
	for i, d := range ds {
		hs[i] = d.Handle.(*handle)
	}
	return hs
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func (s *subscription) release(hs []*handle) {
	s.mu.Lock()
	for _, h := range hs {
		delete(s.held, h.id)
		delete(s.loose, h.id)
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

// ack is one XACK for the whole batch. XACK is idempotent (an id already
// acknowledged is skipped), and a call that failed on a reset connection
// may have been applied with only its answer lost: reporting that as a
// failed settlement would leave the entry neither pending nor redelivered
// (the fault kit's conn-reset scenario lost two messages that way). So a
// failed XACK is retried on a fresh connection, with a short backoff
// (10 ms doubling, five retries), before the settlement is reported failed.
func (s *subscription) ack(ctx context.Context, hs []*handle) error {
	keys := ids(hs)
	return retryFresh(ctx, func() error { return s.a.rc.XAck(ctx, s.stream, s.group, keys...).Err() })
}

// retryFresh runs call, a command that is safe to repeat, until it
// succeeds, ctx is done or it failed six times, waiting 10 ms doubling
// between tries (go-redis takes a fresh connection for each), and returns
// its last error.
func retryFresh(ctx context.Context, call func() error) error {
	backoff := 10 * time.Millisecond
	for retry := 0; ; retry++ {
		err := call()
		if err == nil || retry == 5 || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff *= 2
	}
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
		m := kit.RequeueCopy(d, 0) // the count in its header; the delay is the delayed set's
		args := append([]any{delay.Milliseconds(), s.stream, s.group, hs[i].id}, s.encodeCopy(hs[i], &m)...)
		delayAddAckScript.Eval(ctx, pipe, []string{s.a.delayedMsgKey(), s.a.delayedKey(), s.stream}, args...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && s.committed(ctx, hs) {
		return nil // the scripts ran; only their answers were lost
	}
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
		for i, d := range ds {
			m := kit.DeadLetterCopy(d, disp)
			p.XAdd(ctx, &goredis.XAddArgs{Stream: dlq, Values: s.encodeCopy(hs[i], &m)})
		}
		p.XAck(ctx, s.stream, s.group, ids(hs)...)
		return nil
	})
	if err != nil && s.committed(ctx, hs) {
		return nil // EXEC ran; only its answer was lost
	}
	if err != nil {
		return fmt.Errorf("%w: dead-letter to %s: %v", ports.ErrUnconfirmed, dlq, err)
	}
	return nil
}

// committed settles the doubt left by an atomic step (MULTI/EXEC, a Lua
// script) that acknowledges hs and whose answer was lost with its
// connection: it may have run. The entries are held by this consumer and
// only that step acknowledges them, so it ran if and only if none of them
// is pending any more. The check is retried on a fresh connection as ack
// is; it reports true only when the broker answered that no entry is
// pending, and false when any still is or the broker could not be asked
// (the settlement is then reported failed, and the entries come back if
// they are still pending).
func (s *subscription) committed(ctx context.Context, hs []*handle) bool {
	if ctx.Err() != nil {
		return false
	}
	cmds := make([]*goredis.XPendingExtCmd, len(hs))
	err := retryFresh(ctx, func() error {
		pipe := s.a.rc.Pipeline()
		for i, h := range hs {
			cmds[i] = pipe.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: s.stream, Group: s.group, Start: h.id, End: h.id, Count: 1})
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return false
	}
	for _, c := range cmds {
		if len(c.Val()) > 0 {
			return false
		}
	}
	return true
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
		s.inbox.Close() // queued deliveries stay held and are released below
		waited := make(chan struct{})
		go func() { s.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
			s.stopErr = fmt.Errorf("redis: stop %s: %w", s.stream, ctx.Err())
		}
		var errs []error
		ids := s.heldIDs()
		s.mu.Lock()
		for id := range s.loose {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		if len(ids) > 0 {
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
		if err := s.instance.release(ctx); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 && s.stopErr == nil {
			s.stopErr = fmt.Errorf("redis: stop %s: %w", s.stream, errors.Join(errs...))
		}
		s.a.forget(s)
		s.errs.Close()
	})
	return s.stopErr
}

// Errors reports asynchronous errors; closed after Stop.
func (s *subscription) Errors() <-chan error { return s.errs.C() }
