package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// entry is a record's Handle: a stream entry this consumer holds.
type entry struct {
	id     string
	ident  string // the delivery's identity, under which fields are held
	fields []any  // a field/value entry's data fields (fields.go), else nil
	msg    ports.Message
	count  int // RedeliveryCount
}

// sub is a driver subscription: one consumer of one consumer group.
type sub struct {
	c         *conn
	spec      ports.SubscriptionSpec
	stream    string
	group     string
	consumer  string
	taken     string // the key of consumer in conn.consumers
	broadcast bool
	hbKey     string
	hbTTL     time.Duration
	instance  *instanceClaim // a Broadcast instance's claim (instance.go)
	single    *lease         // SingleActive: read only while holding it

	ctx    context.Context // cancelled by Close: the lease loop, the claims
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Read by ReceiveBatch only.
	recs      []driver.Record
	own       string // position in this consumer's own pending entries; "" once read
	cursor    string // XAUTOCLAIM cursor
	lastClaim time.Time

	mu    sync.Mutex
	held  map[string]*entry   // received and not settled, renewed by the lease loop
	loose map[string]struct{} // settlement failed: pending, not renewed
}

var (
	_ driver.Subscription = (*sub)(nil)
	_ driver.Requeuer     = (*sub)(nil)
)

// Subscribe creates or joins the consumer group of spec.
//
// LoadBalance: the group is spec.Group, created at the stream's end (or
// its first entry for StartEarliest) on first use and kept while no
// instance runs. Broadcast: the group is "bc:<group>:<instance>", one per
// instance, with a heartbeat key whose TTL is spec.InstanceTTL (default
// Options.InstanceTTL). The consumer reads its own pending entries again
// first (a restart under the same consumer name after a crash), then new
// ones, and claims the entries other consumers left idle for ClaimMinIdle.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, stream: c.streamKey(spec.Topic), group: spec.Group, own: "0-0", cursor: "0-0",
		held: map[string]*entry{}, loose: map[string]struct{}{}}
	if n, ok := c.o.Existing.group(spec.Topic, spec.Group); ok && spec.Mode == ports.LoadBalance {
		s.group = n
	}
	s.consumer = c.o.Consumer
	if spec.Mode == ports.Broadcast {
		s.broadcast = true
		s.group = broadcastPrefix + spec.Group + ":" + spec.Instance
		s.consumer = "c-" + spec.Instance // the instance claim keeps it to one subscription
		s.hbKey = c.heartbeatKey(s.stream, s.group)
		s.hbTTL = spec.InstanceTTL
		if s.hbTTL <= 0 {
			s.hbTTL = c.o.InstanceTTL
		}
	}
	if s.consumer == "" {
		s.consumer = "c-" + ports.NewID()
	}
	c.mu.Lock()
	if _, dup := c.consumers[s.stream+"\x00"+s.group+"\x00"+s.consumer]; dup {
		s.consumer += "-" + ports.NewID() // two subscriptions of this adapter never share a consumer
	}
	s.taken = s.stream + "\x00" + s.group + "\x00" + s.consumer
	c.consumers[s.taken] = struct{}{}
	c.mu.Unlock()
	if err := s.claimInstance(ctx); err != nil {
		s.forget()
		return nil, err
	}
	if err := s.join(ctx); err != nil {
		_ = s.instance.release(context.WithoutCancel(ctx))
		s.forget()
		return nil, err
	}
	c.mu.Lock()
	c.streams[s.stream] = struct{}{}
	c.mu.Unlock()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if spec.SingleActive {
		s.single = newLease(s)
		s.single.try(s.ctx)
		s.wg.Add(1)
		go s.single.run(s.ctx)
	}
	s.wg.Add(1)
	go s.leaseLoop()
	s.instance.start()
	c.o.Logger.Info("sluice redis: consuming; this consumer's own pending entries are read again at once, other consumers' pending entries are claimed once idle for claim_min_idle",
		"stream", s.stream, "group", s.group, "consumer", s.consumer, "claim_min_idle", c.o.ClaimMinIdle)
	return s, nil
}

func (s *sub) forget() {
	s.c.mu.Lock()
	delete(s.c.consumers, s.taken)
	s.c.mu.Unlock()
}

// join creates the group (idempotently).
func (s *sub) join(ctx context.Context) error {
	var err error
	if s.broadcast {
		err = joinScript.Run(ctx, s.c.rc, []string{s.stream, s.hbKey}, s.group, ms(s.hbTTL)).Err()
	} else {
		// A new group starts at the stream's end ($), or at its first
		// entry (0) for StartEarliest; an existing one keeps its position.
		at := "$"
		if s.spec.Start == ports.StartEarliest {
			at = "0"
		}
		if _, adopted := s.c.o.Existing.stream(s.spec.Topic); adopted {
			err = s.c.rc.XGroupCreate(ctx, s.stream, s.group, at).Err() // never creates an adopted stream
		} else {
			err = s.c.rc.XGroupCreateMkStream(ctx, s.stream, s.group, at).Err()
		}
		if goredis.HasErrorPrefix(err, "BUSYGROUP") {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("redis: create consumer group %q on %s: %w", s.group, s.stream, err)
	}
	return nil
}

// ReceiveBatch reads up to max entries: first this consumer's own pending
// entries (once, from the start), every ClaimInterval the entries idle
// for ClaimMinIdle (XAUTOCLAIM, with their exact delivery count), and
// otherwise new entries (XREADGROUP >, blocking for ClaimInterval).
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		if s.single != nil && !s.single.wait(ctx) {
			return nil, ctx.Err()
		}
		recs, err := s.recs[:0], error(nil)
		switch {
		case s.own != "":
			recs, err = s.pending(ctx, recs, "own", max)
		case time.Since(s.lastClaim) >= s.c.o.ClaimInterval:
			s.lastClaim = time.Now()
			recs, err = s.pending(ctx, recs, "claim", max)
		}
		if err == nil && len(recs) == 0 {
			recs, err = s.read(ctx, recs, max)
		}
		s.recs = recs
		switch {
		case len(recs) > 0:
			return recs, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case goredis.HasErrorPrefix(err, "NOGROUP"):
			// The group is gone (a server restarted without persistence,
			// or an expired broadcast group): create it again.
			return nil, errors.Join(fmt.Errorf("redis: consumer group %q on %s vanished, recreating it: %w", s.group, s.stream, err), s.join(ctx))
		case err != nil:
			return nil, err
		}
	}
}

// pending runs claimScript: this consumer's own pending entries (mode
// "own") or the group's idle ones (mode "claim").
func (s *sub) pending(ctx context.Context, recs []driver.Record, mode string, n int) ([]driver.Record, error) {
	at := s.cursor
	if mode == "own" {
		at = s.own
	}
	res, err := claimScript.Run(ctx, s.c.rc, []string{s.stream}, s.group, s.consumer, s.c.o.ClaimMinIdle.Milliseconds(), at, n, mode).Slice()
	if err != nil {
		return recs, err
	}
	if len(res) != 3 {
		return recs, fmt.Errorf("redis: claim script returned %d values, want 3", len(res))
	}
	next, _ := res[0].(string)
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	if mode == "own" {
		s.own = next
	} else {
		s.cursor = next
	}
	now := time.Now()
	for i, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			continue
		}
		id, _ := pair[0].(string)
		flat, _ := pair[1].([]any)
		if flat == nil {
			continue // deleted by a trim: XAUTOCLAIM drops it from the pending list
		}
		values := make(map[string]any, len(flat)/2)
		for j := 0; j+1 < len(flat); j += 2 {
			k, _ := flat[j].(string)
			values[k] = flat[j+1]
		}
		count := int64(1)
		if i < len(counts) {
			count, _ = counts[i].(int64)
		}
		recs = s.record(recs, id, values, count, now)
	}
	return recs, nil
}

func (s *sub) read(ctx context.Context, recs []driver.Record, n int) ([]driver.Record, error) {
	res, err := s.c.rc.XReadGroup(ctx, &goredis.XReadGroupArgs{
		Group: s.group, Consumer: s.consumer, Streams: []string{s.stream, ">"}, Count: int64(n), Block: s.c.o.ClaimInterval,
	}).Result()
	if errors.Is(err, goredis.Nil) {
		return recs, nil
	}
	if err != nil {
		return recs, err
	}
	now := time.Now()
	for _, st := range res {
		for _, m := range st.Messages {
			recs = s.record(recs, m.ID, m.Values, 1, now)
		}
	}
	return recs, nil
}

// record appends the record of entry id unless this consumer holds it
// already (claimed back from itself), and holds it.
func (s *sub) record(recs []driver.Record, id string, values map[string]any, count int64, now time.Time) []driver.Record {
	r, fields := decode(s.stream, s.group, id, values, count)
	e := &entry{id: id, fields: fields, msg: r.Message, count: r.RedeliveryCount, ident: r.BrokerID}
	if hid, _ := ports.IdentityFromHeaders(r.Message.Headers); hid != "" {
		e.ident = hid
	}
	s.mu.Lock()
	_, dup := s.held[id]
	if !dup {
		s.held[id] = e
		delete(s.loose, id)
	}
	s.mu.Unlock()
	if dup {
		return recs
	}
	if fields != nil {
		s.c.holdFields(e.ident, fields)
	}
	r.Message.Topic, r.ReceivedAt, r.Handle = s.spec.Topic, now, e
	return append(recs, r)
}

// settled forgets es: acknowledged (ok) or left pending unrenewed so that
// a claim hands them out again after ClaimMinIdle (not ok).
func (s *sub) settled(es []*entry, ok bool) {
	s.mu.Lock()
	for _, e := range es {
		if s.held[e.id] != e {
			continue
		}
		delete(s.held, e.id)
		if !ok {
			s.loose[e.id] = struct{}{}
		}
		if e.fields != nil {
			defer s.c.dropFields(e.ident)
		}
	}
	s.mu.Unlock()
}

func entries(handles []any) ([]*entry, []string) {
	es, ids := make([]*entry, len(handles)), make([]string, len(handles))
	for i, h := range handles {
		es[i] = h.(*entry)
		ids[i] = es[i].id
	}
	return es, ids
}

// SendAcks is one XACK with every id. When its answer is lost with the
// connection it may have been applied: committed asks the group.
func (s *sub) SendAcks(ctx context.Context, handles []any) error {
	es, ids := entries(handles)
	err := s.c.rc.XAck(ctx, s.stream, s.group, ids...).Err()
	if err != nil && !s.committed(ctx, ids) {
		s.settled(es, false)
		return err
	}
	s.settled(es, true)
	return nil
}

// SendRequeues leaves the entries pending and sets their idle time to
// ClaimMinIdle−delay (XCLAIM … IDLE … JUSTID, which does not count a
// delivery), so XAUTOCLAIM hands them out again after delay and counts
// the delivery. A delay of ClaimMinIdle or more goes through the delayed
// set instead: a copy with the redelivery count in its header is stored
// and the original acknowledged, in one atomic step per entry.
func (s *sub) SendRequeues(ctx context.Context, handles []any, delay time.Duration) error {
	es, ids := entries(handles)
	minIdle := s.c.o.ClaimMinIdle
	if delay < minIdle {
		err := s.setIdle(ctx, ids, minIdle-delay)
		s.settled(es, err == nil)
		return err
	}
	pipe := s.c.rc.Pipeline()
	for _, e := range es {
		d := &ports.Delivery{Message: e.msg, ID: e.ident, RedeliveryCount: e.count}
		if e.ident == "redis:"+s.stream+":"+e.id {
			d.IDSource = ports.IDBroker
		}
		m := kit.RequeueCopy(d, 0) // the count in its header; the delay is the delayed set's
		fields := encodeFor(s.c.o.Wire, &m)
		if e.fields != nil {
			fields = encodeFields(e.fields, &m)
		}
		args := append([]any{delay.Milliseconds(), s.stream, s.group, e.id}, fields...)
		delayAddAckScript.Eval(ctx, pipe, []string{s.c.delayedMsgKey(), s.c.delayedKey(), s.stream}, args...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && !s.committed(ctx, ids) { // the scripts may have run with only their answers lost
		for _, c := range cmds {
			if c.Err() != nil {
				err = c.Err()
				break
			}
		}
		s.settled(es, false)
		return err
	}
	s.settled(es, true)
	return nil
}

// setIdle is XCLAIM <stream> <group> <self> 0 <ids…> IDLE <idle> JUSTID:
// the entries stay pending with this consumer, their delivery count
// unchanged, and become claimable by XAUTOCLAIM once ClaimMinIdle−idle has
// passed.
func (s *sub) setIdle(ctx context.Context, ids []string, idle time.Duration) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 8+len(chunk))
		args = append(args, "XCLAIM", s.stream, s.group, s.consumer, 0)
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
		if err := s.c.rc.Do(ctx, args...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// committed settles the doubt left by a step that acknowledges ids (an
// XACK, a Lua script) whose answer was lost with its connection: it may
// have run. The entries are held by this consumer and only that step
// acknowledges them, so it ran if and only if none of them is pending any
// more. The check is retried on a fresh connection; it reports true only
// when the broker answered that no entry is pending, and false when any
// still is or the broker could not be asked (the settlement then fails,
// and the entries come back if they are still pending).
func (s *sub) committed(ctx context.Context, ids []string) bool {
	cmds := make([]*goredis.XPendingExtCmd, len(ids))
	err := retryFresh(ctx, func() error {
		pipe := s.c.rc.Pipeline()
		for i, id := range ids {
			cmds[i] = pipe.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: s.stream, Group: s.group, Start: id, End: id, Count: 1})
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

// retryFresh runs call, a read that is safe to repeat, until it succeeds,
// ctx is done or it failed six times, waiting 10 ms doubling between tries
// (go-redis takes a fresh connection for each), and returns its last
// error.
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

// leaseLoop renews the idle time of every held entry every ClaimMinIdle/3
// (so other consumers do not claim the work of a live, slow one) and the
// broadcast heartbeat every TTL/3.
func (s *sub) leaseLoop() {
	defer s.wg.Done()
	lease := time.NewTicker(s.c.o.ClaimMinIdle / 3)
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
			if err := s.c.rc.Set(s.ctx, s.hbKey, "1", s.hbTTL).Err(); err != nil && s.ctx.Err() == nil {
				s.warn("renew the heartbeat of a broadcast instance", err)
			}
		case <-lease.C:
			ids := s.heldIDs(false)
			for len(ids) > 0 {
				chunk := ids[:min(len(ids), 500)]
				ids = ids[len(chunk):]
				args := []any{s.group, s.consumer}
				for _, id := range chunk {
					args = append(args, id)
				}
				if err := renewScript.Run(s.ctx, s.c.rc, []string{s.stream}, args...).Err(); err != nil && s.ctx.Err() == nil {
					s.warn(fmt.Sprintf("renew the lease of %d held entries", len(chunk)), err)
				}
			}
		}
	}
}

func (s *sub) warn(what string, err error) {
	s.c.o.Logger.Warn("sluice redis: "+what, "stream", s.stream, "group", s.group, "consumer", s.consumer, "err", err)
}

// heldIDs returns the ids of the held entries, and of the loose ones too.
func (s *sub) heldIDs(loose bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.held)+len(s.loose))
	for id := range s.held {
		ids = append(ids, id)
	}
	if loose {
		for id := range s.loose {
			ids = append(ids, id)
		}
	}
	return ids
}

// Close hands every held entry back to the group: their idle time is set
// to ClaimMinIdle, so the next XAUTOCLAIM of any consumer of the group
// takes them (nothing is acknowledged). A Broadcast instance whose
// InstanceTTL is zero destroys its group; one with a TTL leaves its
// heartbeat to expire after the TTL.
func (s *sub) Close(ctx context.Context) error {
	s.cancel()
	s.wg.Wait()
	var errs []error
	if ids := s.heldIDs(true); len(ids) > 0 {
		if err := s.setIdle(ctx, ids, s.c.o.ClaimMinIdle); err != nil {
			errs = append(errs, fmt.Errorf("release %d held entries (they are claimed after ClaimMinIdle instead): %w", len(ids), err))
		}
	}
	switch {
	case s.broadcast && s.spec.InstanceTTL <= 0:
		errs = append(errs, s.c.rc.XGroupDestroy(ctx, s.stream, s.group).Err())
		s.c.rc.Del(ctx, s.hbKey)
	case s.broadcast:
		errs = append(errs, s.c.rc.Set(ctx, s.hbKey, "1", s.hbTTL).Err())
		fallthrough
	default:
		_ = leaveScript.Run(ctx, s.c.rc, []string{s.stream}, s.group, s.consumer).Err()
	}
	errs = append(errs, s.instance.release(ctx))
	s.mu.Lock()
	for _, e := range s.held {
		if e.fields != nil {
			defer s.c.dropFields(e.ident)
		}
	}
	s.mu.Unlock()
	s.forget()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redis: stop %s: %w", s.stream, err)
	}
	return nil
}
