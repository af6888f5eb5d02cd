package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// sub is one consumer of a SubscriptionSpec on the consume connection.
// ReceiveBatch reads amqp091's delivery channel itself; after a loss it
// returns the loss and the next call declares and consumes again.
type sub struct {
	c                     *conn
	spec                  ports.SubscriptionSpec
	queue, dlGroup        string
	expires               time.Duration // x-expires; 0: none
	deleteOnStop, adopted bool
	bestEffort            bool        // a non-durable classic queue
	routeBound            atomic.Bool // an adopted queue's requeue route is bound

	mu     sync.Mutex // guards cur, its tags and the acks written on it
	cur    *consumer
	closed bool
	recs   []driver.Record // reused by ReceiveBatch
}

var _ driver.Requeuer = (*sub)(nil)

// consumer is one channel consuming the queue.
type consumer struct {
	ch        *amqp.Channel
	dels      <-chan amqp.Delivery
	closed    <-chan *amqp.Error
	cancelled <-chan string
	tags      tags
}

// handle is a record's channel and delivery tag, and what a requeue copy
// is made of.
type handle struct {
	c       *consumer
	tag     uint64
	headers ports.Headers
	payload []byte
	count   int // the redelivery count reported
	mode    uint8
}

var errDeliveryLost = fmt.Errorf("amqp: %w", driver.ErrRecordsLost)

// instanceSettle is how long the Subscribe of a BROADCAST instance retries
// while its queue still counts the consumer of a channel just closed.
const instanceSettle = 2 * time.Second

// Subscribe declares and binds the subscription's queue (an adopted one is
// checked, never declared) and consumes it with a prefetch of
// spec.InFlight. It logs the queue's type and whether its redelivery count
// is exact (at Info when that differs from the capabilities).
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, queue: c.topo.queueFor(spec), dlGroup: firstOf(spec.Group, "dead-letters"), bestEffort: spec.QoS == ports.BestEffort}
	if q, ok := c.opts.Existing.queue(spec.Topic, spec.Group); ok && spec.Mode == ports.LoadBalance {
		s.queue, s.adopted = q, true
		if spec.SingleActive {
			return nil, fmt.Errorf("%w: amqp: SubscriptionSpec.SingleActive on adopted queue %q: single-active is the queue argument x-single-active-consumer, fixed when the queue was declared, and sluice never redeclares an adopted queue (declare it with that argument, and subscribe without SingleActive)", ports.ErrUnsupported, q)
		}
	} else if s.bestEffort && spec.Mode == ports.LoadBalance {
		s.queue = c.topo.groupQueue(spec.Topic, spec.Group, queueShape{bestEffort: true}).name
	}
	if err := broadcastNames(spec); err != nil {
		return nil, err
	}
	if spec.Mode == ports.Broadcast {
		s.expires = spec.InstanceTTL
		if s.expires == 0 {
			s.expires, s.deleteOnStop = c.opts.OrphanExpiry, true
		}
	}
	cur, err := s.establish(ctx)
	for end := time.Now().Add(instanceSettle); errors.Is(err, ports.ErrInstanceShared) && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		cur, err = s.establish(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: subscribe %s: %w", s.queue, err)
	}
	s.cur = cur
	qt := string(c.opts.QueueType)
	if s.bestEffort {
		qt = string(Classic)
	} else if s.adopted {
		qt = c.queueType(ctx, s.queue)
	}
	exact, log := qt == string(Quorum), c.opts.Logger.Debug
	if exact != c.caps.ExactRedeliveryCount && !s.bestEffort {
		log = c.opts.Logger.Info
	}
	log("sluice amqp: subscribed", "queue", s.queue, "adopted", s.adopted, "queue_type", qt, "exact_redelivery_count", exact)
	return s, nil
}

// broadcastNames refuses a BROADCAST group or instance with a '/': in
// "<ns>/<topic>/bc/<group>/<instance>" two instances could name one queue.
func broadcastNames(spec ports.SubscriptionSpec) error {
	for _, f := range [][2]string{{"Group", spec.Group}, {"Instance", spec.Instance}} {
		if spec.Mode == ports.Broadcast && strings.Contains(f[1], "/") {
			return &ports.ValueError{Field: "SubscriptionSpec." + f[0], Reason: fmt.Sprintf("%q: a BROADCAST %s must not contain '/' on amqp (group and instance are the last two '/'-separated parts of the instance's queue name)", f[1], strings.ToLower(f[0]))}
		}
	}
	return nil
}

// establish declares the queues and consumes. A BROADCAST consumer is
// exclusive, which quorum queues ignore: its consumer count is checked
// before and after consuming.
func (s *sub) establish(ctx context.Context) (*consumer, error) {
	ch, err := s.c.subC.channel(ctx)
	if err != nil {
		return nil, err
	}
	cur := &consumer{ch: ch}
	exclusive := s.spec.Mode == ports.Broadcast
	if err = s.declare(ctx, &cur.ch); err == nil {
		ch = cur.ch
		err = ch.Qos(s.spec.InFlight, 0, false)
	}
	if err == nil && exclusive {
		err = s.checkAlone(ch, 0)
	}
	if err == nil {
		cur.closed, cur.cancelled = ch.NotifyClose(make(chan *amqp.Error, 1)), ch.NotifyCancel(make(chan string, 1))
		cur.dels, err = ch.Consume(s.queue, "sluice-"+ports.NewID(), false, exclusive, false, false, nil)
		var ae *amqp.Error
		if exclusive && errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
			err = s.instanceInUse(err)
		}
	}
	if err == nil && exclusive {
		err = s.checkAlone(ch, 1)
	}
	if err != nil {
		cur.ch.Close() // cancels the consumer: the broker requeues what it delivered
		return nil, err
	}
	cur.tags.ack = cur.ch.Ack
	return cur, nil
}

// declare declares the subscription's queue (an adopted one is checked to
// exist) and, unless dead-lettering is off, the group's queue of the
// dead-letter topic.
func (s *sub) declare(ctx context.Context, ch **amqp.Channel) error {
	t := s.c.topo
	if s.adopted {
		if _, err := (*ch).QueueDeclarePassive(s.queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("adopted queue %q (Options.Existing) does not exist; sluice never declares an adopted queue: %w", s.queue, err)
		}
	} else {
		sh := s.c.shape(s.spec.Topic, s.spec.SingleActive, s.bestEffort)
		sh.expires = s.expires
		if err := s.c.declareOn(ctx, s.c.subC, ch, t.queueDecl(s.queue, s.spec.Topic, sh), s.spec.Topic, true); err != nil {
			return invalid(err)
		}
	}
	dlt := ports.DeadLetterTopic(s.spec.Topic)
	if _, adopted := s.c.opts.Existing.topic(dlt); s.spec.DisableDeadLetter || s.bestEffort || len(dlt) > 200 || adopted {
		return nil
	}
	return invalid(s.c.declareOn(ctx, s.c.subC, ch, t.queueDecl(t.lbQueue(dlt, s.dlGroup), dlt, queueShape{}), dlt, true))
}

// invalid marks a broker refusal of a declaration as ports.ErrInvalid.
func invalid(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused) {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return err
}

// checkAlone refuses a BROADCAST queue with more than own consumers.
func (s *sub) checkAlone(ch *amqp.Channel, own int) error {
	q, err := ch.QueueDeclarePassive(s.queue, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("check consumers of queue %q: %w", s.queue, err)
	}
	if q.Consumers > own {
		return s.instanceInUse(fmt.Errorf("queue %q has %d other consumer(s)", s.queue, q.Consumers-own))
	}
	return nil
}

func (s *sub) instanceInUse(cause error) error {
	return fmt.Errorf("%w: %w", &ports.InstanceSharedError{Instance: s.spec.Instance,
		Where: fmt.Sprintf("a running consumer on queue %q: two running instances share the same Instance", s.queue)}, cause)
}

// ReceiveBatch returns what the broker pushed (up to max, at least one);
// the prefetch bounds what it pushes. After a loss it consumes again.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	s.mu.Lock()
	cur, closed := s.cur, s.closed
	var err error
	if cur != nil && s.spec.InFlight > 0 && len(cur.tags.out) >= s.spec.InFlight && cur.tags.waiting() {
		err = cur.tags.flush() // the prefetch is full of records settled above a gap
	}
	s.mu.Unlock()
	if closed {
		return nil, ports.ErrClosed
	}
	if err != nil {
		return nil, s.lose(cur)
	}
	if cur == nil {
		nc, err := s.establish(ctx)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.ch.Close()
			return nil, ports.ErrClosed
		}
		s.cur, cur = nc, nc
		s.mu.Unlock()
		s.c.opts.Logger.Info("sluice amqp: subscription re-established", "queue", s.queue)
	}
	var d amqp.Delivery
	ok := true
	select {
	case d, ok = <-cur.dels:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if !ok {
		return nil, s.lose(cur)
	}
	now, recs := time.Now(), s.recs[:0]
	for ok {
		dec := decode(&d)
		n := dec.requeues + dec.returns
		recs = append(recs, driver.Record{
			Message:         ports.Message{Topic: s.spec.Topic, Key: dec.headers[ports.HeaderPartitionKey], Payload: d.Body, Headers: dec.headers},
			RedeliveryCount: n, Facts: dec.facts, ReceivedAt: now, Err: dec.err,
			Handle: &handle{c: cur, tag: d.DeliveryTag, headers: dec.headers, payload: d.Body, count: n, mode: d.DeliveryMode},
		})
		if len(recs) == max {
			break
		}
		select {
		case d, ok = <-cur.dels: // a closed channel is seen by the next call
		default:
			ok = false
		}
	}
	s.mu.Lock()
	for _, r := range recs {
		cur.tags.add(r.Handle.(*handle).tag)
	}
	s.mu.Unlock()
	s.recs = recs
	return recs, nil
}

// lose forgets cur after its delivery channel closed and says why.
func (s *sub) lose(cur *consumer) error {
	s.mu.Lock()
	if s.cur == cur {
		s.cur = nil
	}
	s.mu.Unlock()
	err := &lostError{err: fmt.Errorf("amqp: subscription %s lost its channel", s.queue), code: ports.ErrUnreachable}
	if tag, ok := recvNow(cur.cancelled); ok && tag != "" { // notified before the deliveries close
		err = &lostError{err: fmt.Errorf("amqp: subscription %s: consumer %s cancelled by the broker (queue deleted?)", s.queue, tag)}
	} else if e, _ := recvNow(cur.closed); e != nil {
		err.err = fmt.Errorf("%w: %w", err.err, e)
	}
	cur.ch.Close() // after a broker cancel: give back what it holds
	return err
}

func recvNow[T any](c <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-c:
	default:
	}
	return v, ok
}

// SendAcks acks the records of handles with one basic.ack(multiple) up
// to the highest delivery tag below which every record is settled; a
// record settled above an unsettled one is acked with it (or singly when
// the prefetch is full of such records, or at Close). A handle of a lost
// channel, or acked already, cannot be acked: the error wraps
// driver.ErrRecordsLost.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	var buf [64]uint64
	ts, lost := buf[:0], 0
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur
	for _, h := range handles {
		if x := h.(*handle); x.c == cur && cur != nil {
			ts = append(ts, x.tag)
		} else {
			lost++
		}
	}
	if cur != nil {
		n, err := cur.tags.settle(ts)
		if err != nil {
			return errors.Join(err, errDeliveryLost)
		}
		lost += n
	}
	if lost > 0 {
		return fmt.Errorf("%d of %d: %w", lost, len(handles), errDeliveryLost)
	}
	return nil
}

// SendRequeues publishes a copy of each record, its count incremented, to
// the subscription's own queue (at its tail, or through a delay queue) and
// acks the originals once every copy is confirmed.
func (s *sub) SendRequeues(ctx context.Context, handles []any, delay time.Duration) error {
	if err := s.bindRequeueRoute(ctx, delay); err != nil {
		return err
	}
	items := make([]item, len(handles))
	for i, h := range handles {
		x := h.(*handle)
		hd := maps.Clone(x.headers)
		hd[ports.HeaderRedeliveryCount] = strconv.Itoa(x.count + 1)
		delete(hd, kit.HeaderNotBefore)
		items[i] = item{key: s.queue, pub: encode(hd, x.payload), mandatory: true}
		items[i].pub.DeliveryMode = x.mode
		if delay > 0 {
			items[i].key = route(s.queue)
			s.c.pub.delayed(&items[i], delay)
		}
	}
	var errs []error
	for i, err := range s.c.pub.publishAll(ctx, items) {
		if err != nil {
			errs = append(errs, fmt.Errorf("requeue copy %d of %d to %q: %w", i+1, len(items), s.queue, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return s.SendAcks(ctx, handles)
}

// Close closes the channel: the broker requeues every unacked record. A
// BROADCAST queue without InstanceTTL is deleted.
func (s *sub) Close(ctx context.Context) error {
	s.mu.Lock()
	cur := s.cur
	s.cur, s.closed = nil, true
	var err error
	if cur != nil {
		_ = cur.tags.flush() // settled records waiting above a gap; a failure leaves them to be redelivered
		if err = cur.ch.Close(); errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	s.mu.Unlock()
	if s.deleteOnStop {
		ch, derr := s.c.subC.channel(ctx)
		if derr == nil {
			_, derr = ch.QueueDelete(s.queue, false, false, false)
			ch.Close()
		}
		err = errors.Join(err, derr)
	}
	if err != nil {
		return fmt.Errorf("amqp: stop %s: %w", s.queue, err)
	}
	return nil
}
