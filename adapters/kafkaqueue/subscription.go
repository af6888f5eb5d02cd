package kafkaqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
	timers      *kit.Periodic // the heartbeat and the lock renewal
	held        kit.Renewals[*handle]
	group       string // the requeue copies' (kit.CopyGroup)

	// fetcher fetches from Subscribe to Close (kit.Prefetcher: the window
	// grows up to maxWindow while the handlers keep up with a backlog, the
	// next window carrying the accepts of this one; none is prefetched with
	// the renewal off) and sends, within ackLinger after a receive or a
	// settlement, the accepts no fetch took.
	fetcher *kit.Prefetcher[driver.Record]
}

var (
	_ driver.AckFlusher     = (*sub)(nil)
	_ driver.Requeuer       = (*sub)(nil)
	_ driver.DeadLetterer   = (*sub)(nil)
	_ driver.Reporter       = (*sub)(nil)
	_ driver.HeaderDeferrer = (*sub)(nil)
)

// Subscribe joins the share group of spec, creating the topic if needed;
// a new group starts at the topic's end (StartEarliest: its oldest record)
// before the member joins.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	m, parts, err := c.member(ctx, spec)
	if err != nil {
		return nil, err
	}
	if spec.Mode == ports.Broadcast { // an instance's share group must have no member
		resp, err := (&kmsg.ShareGroupDescribeRequest{GroupIDs: []string{m.group}}).RequestWith(ctx, c.cl)
		if err != nil {
			return nil, err
		}
		for _, g := range resp.Groups {
			if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
				return nil, err
			} else if len(g.Members) > 0 {
				return nil, &ports.InstanceSharedError{Instance: spec.Instance, Where: "share group " + m.group + " has a member already"}
			}
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
	s := &sub{c: c, m: m, timers: kit.NewPeriodic(), group: kit.CopyGroup(spec)}
	m.report = func(err error) { s.Report(err) }
	var buf []driver.Record
	if fetch { // the first fetch starts the partitions; what it acquires is kept
		if buf, err = s.start(ctx, parts, spec.InFlight, earliest); err != nil {
			return nil, errors.Join(err, m.heartbeat(ctx, true))
		}
	}
	s.fetcher = kit.NewPrefetcher(kit.PrefetchOptions[driver.Record]{Fetch: s.poll, Held: s.held.Len, Linger: ackLinger,
		Idle:     func(ctx context.Context) { _ = m.flush(ctx) }, // failures are reported
		InFlight: spec.InFlight, Max: maxWindow, Grow: c.opts.RenewFor >= 0}, buf)
	s.timers.Every(time.Minute, s.heartbeat)
	s.timers.Every(time.Second, s.renew)
	return s, nil
}

// start sets the group's share.auto.offset.reset and fetches until every
// partition of parts has a start offset (a fetch made before the group
// assigned them to this member starts nothing), for at most 30 s, and
// returns what the fetches acquired.
func (s *sub) start(ctx context.Context, parts []int32, want int, earliest bool) ([]driver.Record, error) {
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
	var buf []driver.Record
	for err == nil {
		var recs []driver.Record
		var todo []int32
		if recs, err = s.poll(ctx, want); err == nil {
			buf = append(buf, recs...)
			if todo, err = s.m.unstarted(ctx, parts); err == nil && len(todo) == 0 {
				return buf, nil
			}
		}
		if err = cmp.Or(err, ctx.Err()); err == nil {
			err = s.m.heartbeat(ctx, false) // fetch for the assignment
		}
	}
	return buf, fmt.Errorf("kafkaqueue: start the partitions of %s in share group %s: %w", s.m.topic, s.m.group, err)
}

// member makes the share-group member of spec, creating its topic if
// needed, and returns the topic's partitions.
func (c *conn) member(ctx context.Context, spec ports.SubscriptionSpec) (*member, []int32, error) {
	m := &member{cl: c.cl, group: c.group(spec), logical: spec.Topic, topic: c.topic(spec.Topic), wait: c.opts.FetchMaxWait, id: rand.Text()[:22],
		leaders: map[int32]int32{}, sessions: map[int32]*session{}, wake: make(chan struct{})}
	m.facts.ShareGroup = m.group
	m.interval.Store(int64(time.Second))
	m.lock.Store(int64(30 * time.Second))
	if err := c.ensureTopic(ctx, m.topic); err != nil {
		return nil, nil, err
	}
	parts, err := m.meta(ctx)
	return m, parts, err
}

// heartbeat keeps the member in its group, at the interval the coordinator
// asks for (within a second after a failure).
func (s *sub) heartbeat(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next := time.Duration(s.m.interval.Load())
	if err := s.m.heartbeat(ctx, false); err != nil {
		s.Report(err)
		next = min(next, time.Second)
	}
	return next
}

// ReceiveBatch returns buffered records, waiting for the fetcher until
// one comes or ctx is done.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	out, err := s.fetcher.Receive(ctx, max)
	s.held.OutRecords(time.Now(), out)
	return out, err
}

const (
	// outWait bounds a ShareFetch long poll while records are out with
	// handlers: their acknowledgements wait for the fetch in flight.
	outWait = 10 * time.Millisecond
	// ackLinger is how long an accept waits for a fetch to carry it
	// before the fetcher sends it on a ShareAcknowledge of its own.
	ackLinger = 10 * time.Millisecond
	maxWindow = 500 // the largest fetch window (franz-go's), or the in-flight one
)

// poll fetches on each leader's session at once and returns what they
// acquired, held (its locks renewed); with no partition assigned it waits
// for an assignment, at most FetchMaxWait.
func (s *sub) poll(ctx context.Context, want int) ([]driver.Record, error) {
	targets, wake, err := s.m.targets(ctx)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		select {
		case <-wake:
		case <-time.After(s.m.wait):
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
	for ses, parts := range targets {
		wg.Go(func() {
			got, err := s.m.fetch(ses, parts, want, wait)
			mu.Lock()
			defer mu.Unlock()
			if errs = append(errs, err); recs == nil {
				recs = got // the first: not copied
			} else {
				recs = append(recs, got...)
			}
		})
	}
	wg.Wait()
	s.held.HoldRecords(time.Now(), recs) // locked until decode's estimate
	if len(recs) > 0 {
		return recs, nil
	}
	return nil, errors.Join(errs...)
}

// settle acknowledges handles with typ and stops renewing them. Release
// and Reject return once the broker answered.
func (s *sub) settle(handles []any, typ int8) error {
	hs := make([]*handle, len(handles))
	for i, h := range handles {
		hs[i] = h.(*handle)
	}
	as, err := group(hs, typ, typ == ackAccept)
	if typ != ackAccept {
		err = errors.Join(err, kit.SettledAcks(context.Background(), as, ackLinger))
	}
	settled := 0
	if err == nil || errors.Is(err, driver.ErrRecordsLost) {
		s.held.Drop(hs...)
		settled = len(hs)
	}
	s.fetcher.Settled(settled)
	return err
}

// SendAcks accepts the records (Accept), deferred: queued for the next
// request of their session; failures are reported on Errors.
func (s *sub) SendAcks(_ context.Context, handles []any) error { return s.settle(handles, ackAccept) }

// FlushAcks returns once the broker answered every accept SendAcks
// returned before, with their failures, or when ctx is done.
func (s *sub) FlushAcks(ctx context.Context) error { return s.m.flush(ctx) }

// DeferHeaders leaves the headers of the records fetched from now on in
// franz-go's records (kafkawire.DecodeLazy).
func (s *sub) DeferHeaders() { s.m.lazy.Store(true) }

// SendRequeues releases the records (Release): the broker delivers them
// again, to any member, with the delivery count one higher. delay is 0
// (the portable layer holds a delayed requeue).
func (s *sub) SendRequeues(_ context.Context, handles []any, _ time.Duration) error {
	return s.settle(handles, ackRelease)
}

// SendDeadLetters publishes a copy of each record to the dead-letter topic
// (kit.DeadLetterCopy's rules) and, once every copy is confirmed, rejects
// the originals (Reject): the broker never delivers them again.
func (s *sub) SendDeadLetters(ctx context.Context, handles []any, disp ports.Disposition) error {
	copies, ds := make([]ports.Message, len(handles)), make([]*ports.Delivery, len(handles))
	for i, x := range handles {
		ds[i], _ = s.delivery(x.(*handle))
		copies[i] = kit.DeadLetterCopy(ds[i], disp, time.Now())
	}
	if err := kit.PublishErrors(ports.DeadLetter, ds, s.c.SendBatch(ctx, copies)); err != nil {
		return err
	}
	return s.settle(handles, ackReject)
}

// delivery is h's record, its headers read, for a copy of it.
func (s *sub) delivery(h *handle) (*ports.Delivery, time.Time) {
	r := s.m.record(new(kafkawire.Decoder), h, false)
	return kit.RecordDelivery(&r)
}

// Close stops the fetcher and the timers, requeues the records held at
// their last delivery, closes the share sessions (the broker releases what
// they hold) and leaves.
func (s *sub) Close(ctx context.Context) error {
	s.fetcher.Stop() // the fetch in flight, at most FetchMaxWait
	err := errors.Join(s.timers.Stop(ctx), s.requeueLast(ctx))
	return errors.Join(err, s.m.close(ctx))
}

// requeueLast requeues the records held (buffered, or out unsettled) at
// the delivery limit, which the broker would archive if released, as the
// portable layer does: a counted copy addressed to the group, confirmed,
// then Accept. A broadcast's group of its own ends here: it has none.
func (s *sub) requeueLast(ctx context.Context) error {
	var hs []any
	var ds []*ports.Delivery
	var msgs []ports.Message
	for _, h := range s.held.Keys() {
		if s.group != "" && max(h.count, 1) >= s.c.limit { // its attempts so far
			d, at := s.delivery(h)
			hs, ds, msgs = append(hs, h), append(ds, d), append(msgs, kit.RequeueCopy(d, time.Until(at)))
		}
	}
	kit.AddressCopies(msgs, s.group)
	if err := kit.PublishErrors(ports.Requeue, ds, s.c.SendBatch(ctx, msgs)); err != nil || len(hs) == 0 {
		return err
	}
	return s.settle(hs, ackAccept) // sent as the session closes
}

// renew renews the lock of every record held (in buf or out with a
// handler) once half of it has passed, until RenewFor after its
// acquisition or its delivery; one whose lock lapsed is forgotten.
func (s *sub) renew(context.Context) time.Duration {
	now, lock := time.Now(), s.m.lockDuration()
	if due := s.held.Due(now, lock/2, s.c.opts.RenewFor); len(due) > 0 {
		if err := s.m.renew(due, now.Add(lock)); err != nil { // renews the locks it could
			s.Report(fmt.Errorf("kafkaqueue: renew the locks of %d record(s): %w", len(due), err))
		}
	}
	return max(lock/4, 50*time.Millisecond)
}

// DeclareGroup starts the share group of group on topic at the topic's
// end; a group with members is left for its first Subscribe to start.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	m, parts, err := c.member(ctx, ports.SubscriptionSpec{Topic: topic, Group: group})
	if err == nil {
		_, err = m.initialize(ctx, parts, false)
	}
	return err
}
