package kafkaqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	kit.Reports // failed heartbeats and renewals go to Errors
	c           *conn
	m           *member
	topic       ports.Topic
	inFlight    int
	timers      *kit.Periodic // the heartbeat and the lock renewal

	buf  []driver.Record // acquired, not handed out yet (ReceiveBatch only)
	dec  kafkawire.Decoder
	held kit.Renewals[*handle]
}

var (
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
	s := &sub{c: c, m: m, topic: spec.Topic, inFlight: spec.InFlight, timers: kit.NewPeriodic()}
	if fetch { // the first fetch starts the partitions; what it acquires is kept
		if err := s.start(ctx, parts, spec.InFlight, earliest); err != nil {
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
		if err = s.poll(ctx, want); err != nil {
			break
		}
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

// ReceiveBatch returns acquired records, fetching from the leaders of the
// assigned partitions until at least one comes or ctx is done. Records
// already acquired are returned even when ctx is done.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for len(s.buf) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.poll(ctx, max); err != nil {
			return nil, err
		}
	}
	n := min(max, len(s.buf))
	out := make([]driver.Record, n)
	copy(out, s.buf)
	s.buf = append(s.buf[:0], s.buf[n:]...)
	now := time.Now()
	for _, r := range out {
		s.held.Out(now, r.Handle.(*handle))
	}
	return out, nil
}

// outWait bounds a ShareFetch long poll while records are out with
// handlers: their acknowledgements wait for the fetch in flight.
const outWait = 10 * time.Millisecond

// poll runs one ShareFetch on each leader's session (at once) and buffers
// what they acquired (buf is empty); with no partition assigned it waits
// for an assignment, at most FetchMaxWait. With the lock renewal on, a
// fetch asks for a whole in-flight window however few slots are free: the
// records not handed out yet wait in buf, their locks renewed. (More would
// keep records from the group's other members.)
func (s *sub) poll(ctx context.Context, want int) error {
	targets, wake, err := s.m.targets(ctx)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		t := time.NewTimer(s.m.wait)
		defer t.Stop()
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
	wait := s.m.wait
	if s.c.opts.RenewFor >= 0 {
		want = max(want, s.inFlight)
	}
	if s.held.Len() > 0 { // an acknowledgement comes soon: no long poll ahead of it
		wait = min(wait, outWait)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for ses, parts := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.m.fetch(ses, parts, want, wait)
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			for _, a := range got {
				s.buf = append(s.buf, s.record(a))
			}
		}()
	}
	wg.Wait()
	if len(s.buf) > 0 {
		now := time.Now()
		until := now.Add(s.m.lockDuration())
		for _, r := range s.buf {
			s.held.Hold(now, until, r.Handle.(*handle))
		}
		return nil
	}
	return errors.Join(errs...)
}

// record maps a Kafka record onto a driver.Record (kafkawire.Decode: its
// BrokerID is the identity kafka:// gives the same record); the delivery
// count less one is the redelivery count.
func (s *sub) record(a acquired) driver.Record {
	r := a.r
	d := kafkawire.Decode(&s.dec, s.topic, kafkawire.Fields{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
		Timestamp: r.Timestamp, Member: kafkawire.MemberFacts{ShareGroup: s.m.group, DeliveryCount: a.count}},
		r.Headers, func(h kgo.RecordHeader, _ *kit.Names) (string, []byte, bool) { return h.Key, h.Value, true })
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
	}
	return err
}

// SendAcks accepts the records (Accept).
func (s *sub) SendAcks(_ context.Context, handles []any) error { return s.settle(handles, ackAccept) }

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
