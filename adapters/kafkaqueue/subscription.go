package kafkaqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// sub is one share-group member consuming one topic.
type sub struct {
	kit.Reports // failed heartbeats, renewals and deferred accepts go to Errors
	c           *conn
	m           *member
	topic       ports.Topic
	inFlight    int
	timers      *kit.Periodic // the heartbeat and the lock renewal

	// The fetcher: one background goroutine at a time (busy) fetches into
	// buf or flushes the deferred accepts; see run.
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	fmu     sync.Mutex
	buf     []driver.Record // acquired, not handed out yet
	out     []driver.Record // ReceiveBatch's result, reused
	outH    []*handle       // their handles, reused
	busy    bool            // the fetcher runs
	waiting bool            // ReceiveBatch waits for records
	want    int             // ReceiveBatch's max (renewal off: what a fetch asks for)
	window  int             // what a fetch asks for (renewal on), see grow
	full    bool            // the last fetch brought all it asked for: a backlog
	ferr    error           // the fetcher's failure, for ReceiveBatch
	failed  bool            // the last fetch failed: no prefetch until ReceiveBatch asks
	flushAt *time.Timer     // a flush of the deferred accepts is due
	due     bool            // the flush is due now
	closed  bool
	arrived chan struct{} // the fetcher ended a turn (capacity 1)

	dec  kafkawire.Decoder
	held holds
}

var (
	_ driver.AckFlusher   = (*sub)(nil)
	_ driver.Requeuer     = (*sub)(nil)
	_ driver.DeadLetterer = (*sub)(nil)
	_ driver.Reporter     = (*sub)(nil)
)

// Subscribe joins the share group of spec: the topic is created if needed,
// a new group starts at the topic's end (StartEarliest: its oldest record)
// before the member joins, so a message sent after Subscribe returns
// reaches it.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	m, parts, err := c.member(ctx, spec)
	if err != nil {
		return nil, err
	}
	if spec.Mode == ports.Broadcast {
		if n, err := m.members(ctx); err != nil {
			return nil, err
		} else if n > 0 {
			return nil, &ports.InstanceSharedError{Instance: spec.Instance, Where: "share group " + m.group + " has a member already"}
		}
	}
	earliest := spec.Start == ports.StartEarliest || c.opts.StartOldest
	fetch, err := m.initialize(ctx, parts, earliest)
	if err != nil {
		return nil, fmt.Errorf("kafkaqueue: start share group %s on %s: %w", m.group, m.topic, err)
	}
	if err := m.heartbeat(ctx, false); err != nil {
		return nil, err
	}
	s := &sub{c: c, m: m, topic: spec.Topic, inFlight: spec.InFlight, timers: kit.NewPeriodic(), arrived: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	m.report = func(err error) { s.Report(err) }
	if fetch { // the first fetch starts the partitions; what it acquires is kept
		if err := s.start(ctx, parts, spec.InFlight, earliest); err != nil {
			s.cancel()
			return nil, errors.Join(err, m.heartbeat(ctx, true))
		}
	}
	s.timers.Every(time.Minute, s.heartbeat)
	s.timers.Every(time.Second, s.renew)
	return s, nil
}

// start sets the group's share.auto.offset.reset and fetches until every
// partition of parts has a start offset (a fetch made before the group
// assigned them to this member starts nothing). The reset is the group's,
// for all its topics: a start of the group with the other reset, made
// between this setting and that fetch, chooses this topic's start too. It
// gives up after 30 s.
func (s *sub) start(ctx context.Context, parts []int32, want int, earliest bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reset := "latest"
	if earliest {
		reset = "earliest"
	}
	cfg := &kmsg.IncrementalAlterConfigsRequest{Resources: []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeGroupConfig,
		ResourceName: s.m.group, Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "share.auto.offset.reset", Value: &reset}}}}}
	resp, err := cfg.RequestWith(ctx, s.c.cl)
	if err == nil && len(resp.Resources) > 0 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	for err == nil {
		var recs []driver.Record
		if recs, err = s.poll(ctx, want); err != nil {
			break
		}
		s.buf = append(s.buf, recs...)
		var todo []int32
		if todo, err = s.m.unstarted(ctx, parts); err == nil && len(todo) == 0 {
			return nil
		}
		if err = cmp.Or(err, ctx.Err()); err == nil {
			err = s.m.heartbeat(ctx, false) // fetch for the assignment
		}
	}
	return fmt.Errorf("kafkaqueue: start the partitions of %s in share group %s: %w", s.m.topic, s.m.group, err)
}

// member makes the share-group member of spec, creating its topic if
// needed, and returns the topic's partitions.
func (c *conn) member(ctx context.Context, spec ports.SubscriptionSpec) (*member, []int32, error) {
	phys := c.topic(spec.Topic)
	if err := c.ensureTopic(ctx, phys); err != nil {
		return nil, nil, err
	}
	m := newMember(c.cl, c.group(spec), phys, c.opts.FetchMaxWait)
	parts, err := m.meta(ctx)
	return m, parts, err
}

// heartbeat keeps the member in its group, at the interval the coordinator
// asks for (within a second after a failure).
func (s *sub) heartbeat(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.m.heartbeat(ctx, false); err != nil {
		s.Report(err)
		return min(time.Duration(s.m.interval.Load()), time.Second)
	}
	return time.Duration(s.m.interval.Load())
}

// ReceiveBatch returns acquired records, waiting for the fetcher until at
// least one comes or ctx is done. Records already acquired are returned
// even when ctx is done.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	s.fmu.Lock()
	if len(s.buf) == 0 && s.full {
		s.grow()
	}
	for len(s.buf) == 0 {
		if err := s.ferr; err != nil {
			s.ferr = nil
			s.fmu.Unlock()
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			s.fmu.Unlock()
			return nil, err
		}
		s.waiting, s.want, s.failed = true, max, false
		s.startLocked()
		s.fmu.Unlock()
		select {
		case <-s.arrived:
		case <-ctx.Done():
		}
		s.fmu.Lock()
		s.waiting = false
	}
	n := min(max, len(s.buf))
	out := append(s.out[:0], s.buf[:n]...)
	s.out = out
	m := copy(s.buf, s.buf[n:])
	clear(s.buf[m:])
	s.buf = s.buf[:m]
	s.kickLocked()
	s.fmu.Unlock()
	hs := s.outH[:0]
	for _, r := range out {
		hs = append(hs, r.Handle.(*handle))
	}
	s.outH = hs
	s.held.Out(time.Now(), hs...)
	return out, nil
}

// outWait bounds a ShareFetch long poll while records are out with
// handlers: their acknowledgements wait for the fetch in flight.
const outWait = 10 * time.Millisecond

// ackLinger is how long a deferred accept waits for a fetch to carry it
// before the fetcher sends it on a ShareAcknowledge of its own.
const ackLinger = 10 * time.Millisecond

// maxWindow bounds what a fetch asks for (franz-go's default, KIP-1206's),
// unless the in-flight window is larger.
const maxWindow = 500

// prefetchLocked reports whether the fetcher should fetch ahead of
// ReceiveBatch: only while the fetch window has grown past the in-flight
// window (see grow), with the lock renewal on, and while at most one
// fetch window of records is acquired and not settled, so that the next
// window is fetched while the handlers work on this one (and the fetch
// carries their accepts). Otherwise a fetch waits for ReceiveBatch to
// find nothing buffered: a record released (requeued) then comes back
// before the records after it, as the broker hands them out.
func (s *sub) prefetchLocked() bool {
	return s.c.opts.RenewFor >= 0 && !s.failed && s.window > s.inFlight && s.held.Len() <= s.window+s.inFlight
}

// windowLocked is what a fetch asks for (the lock renewal on).
func (s *sub) windowLocked() int { return max(s.window, s.inFlight) }

// grow doubles the fetch window, up to max(maxWindow, InFlight): the
// handlers took every record the last fetch brought, and it brought all
// it asked for (a backlog), so that one fetch at a time on a share
// session holds the handlers up. A window a fetch brings is then consumed
// within about a fetch's round trip, so the records it holds ahead of the
// handlers (from the group's other members) wait no longer than that. A
// fetch that brings less than it asked for (the backlog is drained)
// shrinks the window back to the in-flight window, and prefetching stops.
func (s *sub) grow() {
	if s.c.opts.RenewFor >= 0 {
		s.window = min(2*s.windowLocked(), max(maxWindow, s.inFlight))
	}
}

// kickLocked starts the fetcher if it has work: a window to prefetch, or
// deferred accepts to carry (then at once only with a fetch, else after
// ackLinger).
func (s *sub) kickLocked() {
	if s.busy || s.closed {
		return
	}
	if s.prefetchLocked() {
		s.startLocked()
	} else if s.flushAt == nil && s.m.pending() {
		s.flushAt = time.AfterFunc(ackLinger, s.flushDue)
	}
}

// flushDue starts the fetcher to send the deferred accepts no fetch took.
func (s *sub) flushDue() {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.flushAt, s.due = nil, true
	s.startLocked()
}

// startLocked starts the fetcher unless it runs.
func (s *sub) startLocked() {
	if s.busy || s.closed {
		return
	}
	s.busy = true
	s.wg.Add(1)
	go s.run()
}

// run is the fetcher: it fetches while ReceiveBatch waits with nothing
// buffered or a window can be prefetched, then sends the deferred
// accepts no fetch took once ackLinger has passed.
func (s *sub) run() {
	defer s.wg.Done()
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for !s.closed {
		if s.waiting && len(s.buf) == 0 || s.prefetchLocked() {
			want := s.windowLocked()
			if s.c.opts.RenewFor < 0 {
				want = s.want
			}
			s.due = false
			s.fmu.Unlock()
			recs, err := s.poll(s.ctx, want)
			s.fmu.Lock()
			s.buf = append(s.buf, recs...)
			if s.full = len(recs) >= want; !s.full {
				s.window = s.inFlight
			}
			if err != nil && len(recs) == 0 && s.ctx.Err() == nil {
				s.ferr, s.failed = err, true
			}
			select {
			case s.arrived <- struct{}{}:
			default:
			}
			if err != nil {
				break
			}
			continue
		}
		if s.due {
			s.due = false
			s.fmu.Unlock()
			_ = s.m.flush(s.ctx) // failures are reported
			s.fmu.Lock()
			continue
		}
		break
	}
	s.busy = false
	if !s.closed && s.flushAt == nil && s.m.pending() {
		s.flushAt = time.AfterFunc(ackLinger, s.flushDue)
	}
}

// poll runs one ShareFetch on each leader's session (at once) and returns
// what they acquired, held (its locks renewed) before it is returned; with
// no partition assigned it waits for an assignment, at most FetchMaxWait.
func (s *sub) poll(ctx context.Context, want int) ([]driver.Record, error) {
	targets, wake, err := s.m.targets(ctx)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		t := time.NewTimer(s.m.wait)
		defer t.Stop()
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil, nil
	}
	wait := s.m.wait
	if s.held.Len() > 0 { // an acknowledgement comes soon: no long poll ahead of it
		wait = min(wait, outWait)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		recs []driver.Record
	)
	fetch := func(ses *session, parts []int32) {
		got, err := s.m.fetch(ses, parts, want, wait)
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
		recs = slices.Grow(recs, len(got))
		for _, a := range got {
			recs = append(recs, s.record(a))
		}
	}
	if len(targets) == 1 {
		for ses, parts := range targets {
			fetch(ses, parts)
		}
	} else {
		for ses, parts := range targets {
			wg.Go(func() { fetch(ses, parts) })
		}
		wg.Wait()
	}
	if len(recs) > 0 {
		now := time.Now()
		hs := make([]*handle, len(recs))
		for i, r := range recs {
			hs[i] = r.Handle.(*handle)
		}
		s.held.Hold(now, now.Add(s.m.lockDuration()), hs...)
		return recs, nil
	}
	return nil, errors.Join(errs...)
}

// record maps a Kafka record onto a driver.Record (kafkawire.Decode: its
// BrokerID is the identity kafka:// gives the same record); the delivery
// count less one is the redelivery count.
func (s *sub) record(a acquired) driver.Record {
	r := &a.r
	d := kafkawire.Decode(&s.dec, s.topic, kafkawire.Fields{Topic: s.m.topic, Partition: a.h.partition, Offset: r.offset, Key: r.key, Value: r.value,
		Timestamp: time.UnixMilli(r.ts), Member: kafkawire.MemberFacts{ShareGroup: s.m.group, DeliveryCount: a.count}},
		a.h.s.dec.hdrs[r.h0:r.h1], func(h rawHeader, _ *kit.Names) (string, []byte, bool) { return h.key, h.value, true })
	d.RedeliveryCount, d.Handle = max(a.count-1, 0), a.h
	a.h.msg, a.h.id, a.h.redeliveries = d.Message, d.BrokerID, d.RedeliveryCount
	return d
}

// settle acknowledges handles with typ and stops renewing them.
func (s *sub) settle(handles []any, typ int8) error {
	hs := make([]*handle, len(handles))
	for i, h := range handles {
		hs[i] = h.(*handle)
	}
	err := s.m.ack(hs, typ)
	if err == nil || errors.Is(err, driver.ErrRecordsLost) {
		s.held.Drop(hs...)
		s.fmu.Lock()
		s.kickLocked()
		s.fmu.Unlock()
	}
	return err
}

// SendAcks accepts the records (Accept), deferred: the next request of
// their share session carries the acknowledgement — the next ShareFetch,
// or a ShareAcknowledge when no fetch takes it within ackLinger — and a
// failure is reported on Errors. It returns at once; a record whose lock
// has lapsed or whose share session closed fails with
// driver.ErrRecordsLost.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	hs := make([]*handle, len(handles))
	for i, h := range handles {
		hs[i] = h.(*handle)
	}
	err := s.m.accept(hs, time.Now())
	s.held.Drop(hs...)
	s.fmu.Lock()
	s.kickLocked()
	s.fmu.Unlock()
	return err
}

// FlushAcks returns once the broker answered every deferred accept
// SendAcks returned before, with the failures of those it sent itself
// (the failures of accepts a fetch carried go to Errors), or when ctx is
// done.
func (s *sub) FlushAcks(ctx context.Context) error { return s.m.flush(ctx) }

// SendRequeues releases the records (Release): the broker delivers them
// again, to any member, with the delivery count one higher. delay is 0
// (DelayedRequeue is false: the portable layer holds a delayed requeue).
func (s *sub) SendRequeues(_ context.Context, handles []any, _ time.Duration) error {
	return s.settle(handles, ackRelease)
}

// SendDeadLetters publishes a copy of each record to the dead-letter topic
// (kit.DeadLetterCopy's rules) and, once every copy is confirmed, rejects
// the originals (Reject): the broker never delivers them again.
func (s *sub) SendDeadLetters(ctx context.Context, handles []any, disp ports.Disposition) error {
	copies := make([]ports.Message, len(handles))
	ds := make([]*ports.Delivery, len(handles))
	now := time.Now()
	for i, x := range handles {
		h := x.(*handle)
		d := &ports.Delivery{Message: h.msg, RedeliveryCount: h.redeliveries}
		if d.ID, d.IDSource = ports.IdentityFromHeaders(d.Headers); d.ID == "" {
			d.ID, d.IDSource = h.id, ports.IDBroker
		}
		ds[i], copies[i] = d, kit.DeadLetterCopy(d, disp, now)
	}
	if err := kit.PublishErrors(ports.DeadLetter, ds, s.c.SendBatch(ctx, copies)); err != nil {
		return err
	}
	return s.settle(handles, ackReject)
}

// Close stops the heartbeat and the renewal, closes the share sessions
// (the broker releases every record still acquired: redelivered to another
// member at once) and leaves the group.
func (s *sub) Close(ctx context.Context) error {

	s.fmu.Lock()
	s.closed = true
	if s.flushAt != nil {
		s.flushAt.Stop()
		s.flushAt = nil
	}
	s.fmu.Unlock()
	s.cancel()
	s.wg.Wait() // the fetch in flight, at most FetchMaxWait
	err := s.timers.Stop(ctx)
	s.buf = nil
	return errors.Join(err, s.m.close(ctx))
}

// renew renews the lock of every record acquired and not settled (in buf
// or out with a handler) once half of it has passed, until RenewFor after
// its acquisition or its delivery; a record whose lock lapsed is forgotten
// (the broker delivers it again).
func (s *sub) renew(context.Context) time.Duration {
	now, lock := time.Now(), s.m.lockDuration()
	if due := s.held.Due(now, lock/2, s.c.opts.RenewFor); len(due) > 0 {
		if err := s.m.ack(due, ackRenew); err != nil {
			s.Report(fmt.Errorf("kafkaqueue: renew the locks of %d record(s): %w", len(due), err))
		} else {
			s.held.Renewed(now.Add(lock), due...)
		}
	}
	return max(lock/4, 50*time.Millisecond)
}

// DeclareGroup starts the share group of group on topic at the topic's
// end, so that it keeps what is published before its first member joins.
// A group with members cannot be started here: it sets nothing, and the
// topic starts where its first Subscribe asks.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	m, parts, err := c.member(ctx, ports.SubscriptionSpec{Topic: topic, Group: group})
	if err == nil {
		_, err = m.initialize(ctx, parts, false)
	}
	return err
}
