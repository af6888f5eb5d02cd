package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	fields []any  // a field/value entry's data fields (codec.go), else nil
	facts  entryFacts
}

// sub is a driver subscription: one consumer of one consumer group.
type sub struct {
	c                *conn
	spec             ports.SubscriptionSpec
	stream, group    string
	consumer, token  string // token: this subscription's own, in its leases
	taken            string // its key in conn.consumers
	broadcast        bool
	hbKey            string
	hbTTL            time.Duration
	instance, single *kit.Lease    // a Broadcast instance's claim; SingleActive's reader (lease.go)
	timers           *kit.Periodic // the leases, the renewal of held entries, the heartbeat

	recs        []driver.Record // ReceiveBatch's
	own, cursor string          // positions in this consumer's pending entries ("" once read) and of XAUTOCLAIM
	lastClaim   time.Time

	// held: received and not settled, renewed by renew; failed once its
	// settlement failed (pending, not renewed, claimed after ClaimMinIdle).
	held kit.Held[string, *entry]

	kit.Reports          // the Errors channel
	*kit.RidingAcks[any] // SendAcks, FlushAcks: XACKs deferred to the next read (read), or the writer's (sendAcks)
}

var (
	_ driver.Subscription = (*sub)(nil)
	_ driver.Requeuer     = (*sub)(nil)
	_ driver.Reporter     = (*sub)(nil)
	_ driver.AckFlusher   = (*sub)(nil)
)

// ackInterval bounds how long an XACK no read carries waits for the
// acks' writer.
const ackInterval = 5 * time.Millisecond

// SetReport implements driver.Reporter: failed renewals (held entries,
// the heartbeat) and a lost lease are reported on the Errors channel.
func (s *sub) SetReport(report func(error)) {
	s.Reports.SetReport(report)
	if s.instance != nil {
		s.instance.OnLost(func(err error) { s.warn("renew", "keep its broadcast instance claim", err) })
	}
	if s.single != nil {
		s.single.OnLost(func(err error) { s.warn("renew", "keep its single-active lease", err) })
	}
}

// Subscribe creates or joins the consumer group of spec: spec.Group for
// LoadBalance, "bc:<group>:<instance>" for Broadcast, with a heartbeat key
// whose TTL is spec.InstanceTTL (default Options.InstanceTTL).
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, stream: c.streamKey(spec.Topic), group: c.o.Existing.group(spec.Topic, spec.Group),
		consumer: cmp.Or(c.o.Consumer, "c-"+ports.NewID()), token: ports.NewID(),
		own: "0-0", cursor: "0-0"}
	if spec.Mode == ports.Broadcast {
		s.broadcast, s.group, s.consumer = true, broadcastPrefix+spec.Group+":"+spec.Instance, "c-"+spec.Instance
		s.hbKey, s.hbTTL = c.heartbeatKey(s.stream, s.group), cmp.Or(max(spec.InstanceTTL, 0), c.o.InstanceTTL)
	}
	c.mu.Lock()
	if _, dup := c.consumers[s.stream+"\x00"+s.group+"\x00"+s.consumer]; dup {
		s.consumer += "-" + ports.NewID() // two subscriptions of this adapter never share a consumer
	}
	s.taken = s.stream + "\x00" + s.group + "\x00" + s.consumer
	c.consumers[s.taken] = struct{}{}
	c.streams[s.stream] = struct{}{} // for the janitor
	c.mu.Unlock()
	var err error
	if s.broadcast {
		err = s.claimInstance(ctx)
	}
	if err == nil {
		err = s.join(ctx)
	}
	if err != nil {
		s.instance.Release()
		s.forget()
		return nil, err
	}
	s.RidingAcks = kit.NewRidingAcks(s.sendAcks, func(err error) { s.warn("ack", "acknowledge settled entries", err) }, ackInterval)
	s.timers = kit.NewPeriodic()
	s.timers.Every(c.o.ClaimMinIdle/3, s.renew)
	if s.broadcast {
		s.timers.Every(s.instance.TTL()/3, s.instance.Keep)
		s.timers.Every(max(s.hbTTL/3, 10*time.Millisecond), s.heartbeat)
	}
	if spec.SingleActive {
		s.single = s.lease(c.o.Namespace+":active:"+s.stream+":"+s.group, "single-active lease", c.o.SingleActiveLease)
		s.timers.Every(s.single.TTL()/3, s.single.Keep)
	}
	c.o.Logger.Info("sluice redis: consuming; other consumers' pending entries are claimed once idle for claim_min_idle",
		"stream", s.stream, "group", s.group, "consumer", s.consumer, "claim_min_idle", c.o.ClaimMinIdle)
	return s, nil
}

func (s *sub) forget() {
	s.c.mu.Lock()
	delete(s.c.consumers, s.taken)
	s.c.mu.Unlock()
}

// join creates the group, idempotently (an adopted stream is never
// created), at the stream's end or its start for StartEarliest.
func (s *sub) join(ctx context.Context) error {
	var err error
	_, adopted := s.c.o.Existing.Streams[s.spec.Topic]
	at := "$"
	if s.spec.Start == ports.StartEarliest {
		at = "0"
	}
	switch {
	case s.broadcast:
		err = joinScript.Run(ctx, s.c.rc, []string{s.stream, s.hbKey}, s.group, ms(s.hbTTL)).Err()
	case adopted:
		err = s.c.rc.XGroupCreate(ctx, s.stream, s.group, at).Err()
	default:
		err = s.c.rc.XGroupCreateMkStream(ctx, s.stream, s.group, at).Err()
	}
	if err != nil && !goredis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("redis: create consumer group %q on %s: %w", s.group, s.stream, err)
	}
	return nil
}

// ReceiveBatch reads up to max entries: first this consumer's own pending
// entries (once), every ClaimInterval the group's entries idle for
// ClaimMinIdle, otherwise new entries (blocking for ClaimInterval at most).
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		if s.single != nil && !s.single.Wait(ctx) {
			return nil, ctx.Err()
		}
		recs, err := s.recs[:0], error(nil)
		switch {
		case s.own != "":
			recs, err = s.pending(ctx, recs, "own", &s.own, max)
		case time.Since(s.lastClaim) >= s.c.o.ClaimInterval:
			s.lastClaim = time.Now()
			recs, err = s.pending(ctx, recs, "claim", &s.cursor, max)
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
		case goredis.HasErrorPrefix(err, "NOGROUP"): // a server restarted without persistence, an expired broadcast group
			return nil, errors.Join(fmt.Errorf("redis: consumer group %q on %s vanished, recreating it: %w", s.group, s.stream, err), s.join(ctx))
		case err != nil:
			return nil, err
		}
	}
}

// pending runs claimScript in mode "own" or "claim" from the cursor at.
func (s *sub) pending(ctx context.Context, recs []driver.Record, mode string, at *string, n int) ([]driver.Record, error) {
	res, err := claimScript.Run(ctx, s.c.rc, []string{s.stream}, s.group, s.consumer, s.c.o.ClaimMinIdle.Milliseconds(), *at, n, mode).Slice()
	if err != nil || len(res) != 3 {
		return recs, err
	}
	*at, _ = res[0].(string)
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	for i, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 || pair[1] == nil || i >= len(counts) {
			continue // deleted by a trim: XAUTOCLAIM drops it from the pending list
		}
		flat, _ := pair[1].([]any)
		values := make(map[string]any, len(flat)/2)
		for j := 0; j+1 < len(flat); j += 2 {
			values[fmt.Sprint(flat[j])] = flat[j+1]
		}
		count, _ := counts[i].(int64)
		recs = s.record(recs, fmt.Sprint(pair[0]), values, count)
	}
	return recs, nil
}

// read reads up to n new entries, blocking for ClaimInterval at most, or
// not at all behind the XACK of the settlements deferred since the last
// read, which it sends ahead in one round trip (not cut short by ctx).
func (s *sub) read(ctx context.Context, recs []driver.Record, n int) ([]driver.Record, error) {
	args := &goredis.XReadGroupArgs{Group: s.group, Consumer: s.consumer, Streams: []string{s.stream, ">"}, Count: int64(n), Block: s.c.o.ClaimInterval}
	var rd *goredis.XStreamSliceCmd
	if acks := s.Take(); len(acks) > 0 {
		ctx, p := context.WithoutCancel(ctx), s.c.rc.Pipeline()
		args.Block = -1
		ack := p.XAck(ctx, s.stream, s.group, kit.Keys(acks, entryID)...)
		rd = p.XReadGroup(ctx, args)
		_, _ = p.Exec(ctx)
		s.settle(acks, ack.Err() == nil)
		s.Done(acks, ack.Err())
	} else {
		rd = s.c.rc.XReadGroup(ctx, args)
	}
	res, err := rd.Result()
	if errors.Is(err, goredis.Nil) {
		err = nil
	}
	for _, st := range res {
		for _, m := range st.Messages {
			recs = s.record(recs, m.ID, m.Values, 1)
		}
	}
	return recs, err
}

// record appends the record of entry id and holds it, unless held already
// (claimed back from itself).
func (s *sub) record(recs []driver.Record, id string, values map[string]any, count int64) []driver.Record {
	e := &entry{id: id}
	r, fields := decode(&e.facts, s.stream, s.group, id, values, count)
	hid, _ := ports.IdentityFromHeaders(r.Message.Headers)
	e.fields, e.ident = fields, cmp.Or(hid, r.BrokerID)
	if !s.held.Add(id, e) {
		return recs
	}
	if fields != nil {
		s.c.fields.Hold(e.ident, fields) // for its dead-letter copy (codec.go)
	}
	r.Handle = e
	return append(recs, r)
}

// settle forgets the entries of handles: acknowledged (ok), or left
// pending, not renewed, claimed again after ClaimMinIdle.
func (s *sub) settle(handles []any, ok bool) {
	for _, h := range handles {
		if e := h.(*entry); s.held.Settle(e.id, e, ok) && e.fields != nil {
			s.c.fields.Release(e.ident)
		}
	}
}

// sendAcks is the XACK of what no read carried (the acks' writer) and of
// FlushAcks. A failed XACK, even one Redis applied and whose answer was
// lost, leaves its entries held as failed: those still pending are
// claimed again after ClaimMinIdle (Close releases them at once).
func (s *sub) sendAcks(ctx context.Context, handles []any) error {
	err := s.c.rc.XAck(ctx, s.stream, s.group, kit.Keys(handles, entryID)...).Err()
	s.settle(handles, err == nil)
	return err
}

// SendRequeues sets the entries' idle time to ClaimMinIdle: the next
// XAUTOCLAIM of the group hands them out again and counts the delivery.
// The portable layer holds a delay before.
func (s *sub) SendRequeues(ctx context.Context, handles []any, _ time.Duration) error {
	_, err := s.setIdle(ctx, kit.Keys(handles, entryID), s.c.o.ClaimMinIdle)
	s.settle(handles, err == nil)
	return err
}

// setIdle sets the idle time of the entries of ids this consumer owns
// (0: a renewal; ClaimMinIdle: claimable at once), their count unchanged,
// and returns how many of ids are pending with any consumer.
func (s *sub) setIdle(ctx context.Context, ids []string, idle time.Duration) (n int64, err error) {
	for chunk := range slices.Chunk(ids, 500) {
		args := []any{s.group, s.consumer, idle.Milliseconds()}
		for _, id := range chunk {
			args = append(args, id)
		}
		k, err := idleScript.Run(ctx, s.c.rc, []string{s.stream}, args...).Int64()
		if n += k; err != nil {
			return n, err
		}
	}
	return n, nil
}

// renew resets the idle time of the held entries (every ClaimMinIdle/3),
// so that no other consumer claims the work of a live, slow one.
func (s *sub) renew(ctx context.Context) time.Duration {
	if _, err := s.setIdle(ctx, s.held.Keys(false), 0); err != nil && ctx.Err() == nil {
		s.warn("renew", "renew the held entries", err)
	}
	return 0
}

// heartbeat renews a Broadcast instance's heartbeat (every TTL/3).
func (s *sub) heartbeat(ctx context.Context) time.Duration {
	if err := s.c.rc.Set(ctx, s.hbKey, "1", s.hbTTL).Err(); err != nil && ctx.Err() == nil {
		s.warn("renew", "renew the heartbeat", err)
	}
	return 0
}

// warn reports a failure of what no call returns: on Errors once the
// portable layer set the report function (a *ports.BrokerError of op), in
// the log before.
func (s *sub) warn(op, what string, err error) {
	if !s.Report(&ports.BrokerError{Op: op, Code: s.c.Classify(err).Code, Retryable: true, Err: fmt.Errorf(
		"redis: consumer %s of group %s on stream %s could not %s: %w", s.consumer, s.group, s.stream, what, err)}) {
		s.c.o.Logger.Warn("sluice redis: "+what, "stream", s.stream, "group", s.group, "consumer", s.consumer, "err", err)
	}
}

// entryID is the stream entry id of a handle.
func entryID(e *entry) string { return e.id }

// Close sends the deferred XACKs, then releases every other held entry to
// the group. A Broadcast instance whose InstanceTTL is zero destroys its
// group; one with a TTL leaves its heartbeat to expire.
func (s *sub) Close(ctx context.Context) error {
	s.RidingAcks.Stop()
	_ = s.timers.Stop(context.Background()) // each timer's Redis call is bounded by the client's timeouts
	s.instance.Release()
	s.single.Release()
	var errs []error
	if err := s.FlushAcks(ctx); err != nil {
		errs = append(errs, fmt.Errorf("acknowledge the settled entries (those Redis did not get are delivered again): %w", err))
	}
	held := s.held.Keys(true)
	if _, err := s.setIdle(ctx, held, s.c.o.ClaimMinIdle); err != nil {
		errs = append(errs, fmt.Errorf("release %d held entries (they are claimed after ClaimMinIdle instead): %w", len(held), err))
	}
	switch {
	case s.broadcast && s.spec.InstanceTTL <= 0:
		errs = append(errs, s.c.rc.XGroupDestroy(ctx, s.stream, s.group).Err(), s.c.rc.Del(ctx, s.hbKey).Err())
	case s.broadcast:
		errs = append(errs, s.c.rc.Set(ctx, s.hbKey, "1", s.hbTTL).Err())
		fallthrough
	default:
		_ = leaveScript.Run(ctx, s.c.rc, []string{s.stream}, s.group, s.consumer).Err()
	}
	for _, e := range s.held.Live() {
		if e.fields != nil {
			s.c.fields.Release(e.ident)
		}
	}
	s.forget()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redis: stop %s: %w", s.stream, err)
	}
	return nil
}
