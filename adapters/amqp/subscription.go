package amqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// sub consumes a SubscriptionSpec's queue on the consume connection; after
// a loss ReceiveBatch returns it and its next call consumes again.
type sub struct {
	c                   *conn
	spec                ports.SubscriptionSpec
	queue               string
	adopted, bestEffort bool // bestEffort: a non-durable classic queue
	cons                *kit.Lazy[*consumer]
	cur                 atomic.Pointer[consumer] // the last one established, for FlushAcks
	dels                []amqp.Delivery
	recs                []driver.Record
}

// consumer is one channel consuming the queue. Its ack writer writes what
// SendAcks records as basic.ack(multiple) within ackInterval.
type consumer struct {
	ch        *amqp.Channel
	dels      <-chan amqp.Delivery
	closed    <-chan *amqp.Error
	cancelled <-chan string
	lost      atomic.Bool
	abandoned atomic.Bool // closed by Abandon, not lost
	acks      *kit.AckWriter
}

// handle is a record's channel and delivery tag.
type handle struct {
	c   *consumer
	tag uint64
}

var errDeliveryLost = fmt.Errorf("amqp: %w", driver.ErrRecordsLost)

const (
	ackInterval = 5 * time.Millisecond
	// instanceSettle is how long the Subscribe of a BROADCAST instance
	// retries while its queue still counts a consumer just closed.
	instanceSettle = 2 * time.Second
)

// Subscribe declares and binds the subscription's queue (an adopted one
// is checked) and consumes it with a prefetch of spec.InFlight.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, queue: c.topo.queueFor(spec), bestEffort: spec.QoS == ports.BestEffort}
	s.cons = kit.NewLazy(s.establish, func(c *consumer) bool { return !c.lost.Load() })
	if q, ok := c.opts.Existing.Groups[ExistingGroup{Topic: spec.Topic, Group: spec.Group}]; ok && spec.Mode == ports.LoadBalance {
		if spec.SingleActive {
			return nil, fmt.Errorf("%w: amqp: SubscriptionSpec.SingleActive on adopted queue %q: single-active is the queue argument x-single-active-consumer, fixed when the queue was declared, and sluice never redeclares an adopted queue (declare it with that argument, and subscribe without SingleActive)", ports.ErrUnsupported, q)
		}
		s.queue, s.adopted = q, true
	}
	_, err := s.cons.Get(ctx)
	for end := time.Now().Add(instanceSettle); errors.Is(err, ports.ErrInstanceShared) && time.Now().Before(end); {
		if err := kit.Sleep(ctx, nil, 100*time.Millisecond); err != nil {
			return nil, err
		}
		_, err = s.cons.Get(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: subscribe %s: %w", s.queue, err)
	}
	if s.adopted {
		c.opts.Logger.Info("sluice amqp: subscribed to an adopted queue, used as it is: its redelivery count is exact only if it is a quorum queue", "queue", s.queue)
	}
	return s, nil
}

// establish declares the queues and consumes. A BROADCAST consumer is
// exclusive, which quorum queues ignore, so its count is checked too.
func (s *sub) establish(ctx context.Context) (*consumer, error) {
	if err := s.declare(ctx); err != nil {
		return nil, err
	}
	ch, err := s.c.subC.channel(ctx)
	if err != nil {
		return nil, err
	}
	exclusive := s.spec.Mode == ports.Broadcast
	cur := &consumer{ch: ch}
	if err = ch.Qos(s.spec.InFlight, 0, false); err == nil && exclusive {
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
		ch.Close() // cancels the consumer: the broker requeues what it delivered
		return nil, err
	}
	cur.acks = kit.NewAckWriter(ch.Ack, ackInterval, s.spec.InFlight/2, s.spec.InFlight)
	s.cur.Store(cur)
	return cur, nil
}

// shut stops the ack writer, writing what is settled, and closes the
// channel: the broker requeues the rest.
func (c *consumer) shut() error {
	c.lost.Store(true)
	_ = c.acks.Stop() // a failure leaves them to be redelivered
	if err := c.ch.Close(); !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	return nil // closed already, with the connection or by the broker
}

// declare declares the subscription's queue (an adopted one must exist)
// and the group's queue of the dead-letter topic; a refusal is ErrInvalid.
func (s *sub) declare(ctx context.Context) error {
	t, dlt := s.c.topo, ports.DeadLetterTopic(s.spec.Topic)
	var err error
	if s.adopted {
		err = missing(s.c.subC.with(ctx, passive(s.queue)), "queue %q", s.queue)
	} else {
		err = s.c.declare(ctx, s.c.subC, t.queueDecl(s.queue, s.spec.Topic, s.c.shape(s.spec)), s.spec.Topic, true)
	}
	if _, adopted := s.c.opts.Existing.Topics[dlt]; err == nil && !s.spec.DisableDeadLetter && !s.bestEffort && len(dlt) <= 200 && !adopted {
		dlq := t.queue(dlt, "lb", cmp.Or(s.spec.Group, "dead-letters"))
		err = s.c.declare(ctx, s.c.subC, t.queueDecl(dlq, dlt, queueShape{}), dlt, true)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused) {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return err
}

// checkAlone refuses a BROADCAST queue with more than own consumers.
func (s *sub) checkAlone(ch *amqp.Channel, own int) error {
	q, err := ch.QueueDeclarePassive(s.queue, true, false, false, false, nil)
	if err == nil && q.Consumers > own {
		err = s.instanceInUse(fmt.Errorf("queue %q has %d other consumer(s)", s.queue, q.Consumers-own))
	}
	return err
}

func (s *sub) instanceInUse(cause error) error {
	return fmt.Errorf("%w: %w", &ports.InstanceSharedError{Instance: s.spec.Instance,
		Where: fmt.Sprintf("a running consumer on queue %q: two running instances share the same Instance", s.queue)}, cause)
}

// ReceiveBatch returns what the broker pushed, up to max, at least one.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	cur, err := s.cons.Get(ctx)
	if err != nil {
		return nil, err
	}
	cur.acks.Receiving(true)
	dels, open, err := kit.Take(ctx, cur.dels, max, s.dels[:0])
	cur.acks.Receiving(false)
	if err != nil {
		return nil, err
	}
	if len(dels) == 0 && !open { // a channel closed after deliveries is seen by the next call
		if cur.abandoned.Load() {
			return nil, nil // no fault: the next call opens a channel
		}
		return nil, s.lose(cur)
	}
	now, recs, hs := time.Now(), s.recs[:0], make([]handle, len(dels)) // the handles: one allocation
	for i := range dels {
		d := &dels[i]
		cur.acks.Add(d.DeliveryTag)
		dec, h := decode(d), &hs[i]
		*h = handle{c: cur, tag: d.DeliveryTag}
		recs = append(recs, driver.Record{
			Message:         ports.Message{Topic: s.spec.Topic, Key: dec.headers.Get(ports.HeaderPartitionKey), Payload: d.Body, Headers: dec.headers},
			RedeliveryCount: dec.returns, Facts: ports.NewFacts(dec.facts), ReceivedAt: now,
			Handle: h,
		})
	}
	clear(dels)
	s.dels, s.recs = dels[:0], recs
	return recs, nil
}

// lose shuts cur after its delivery channel closed and says why.
func (s *sub) lose(cur *consumer) error {
	err := &ports.BrokerError{Op: "receive", Code: ports.ErrUnreachable, Retryable: true, Err: fmt.Errorf("amqp: subscription %s lost its channel", s.queue)}
	if tag, ok := kit.Poll(cur.cancelled); ok && tag != "" { // notified before the deliveries close
		err.Code, err.Err = nil, fmt.Errorf("amqp: subscription %s: consumer %s cancelled by the broker (queue deleted?)", s.queue, tag)
	} else if e, _ := kit.Poll(cur.closed); e != nil {
		err.Err = fmt.Errorf("%w: %w", err.Err, e)
	}
	_ = cur.shut() // after a broker cancel: give back what it holds
	return err
}

// SendAcks records the acks of handles, without I/O, for the consumer's
// ack writer. It records all or none: a handle of a lost or another
// channel, or acked already, fails the round (driver.ErrRecordsLost) and
// the caller settles its members one by one; a partial round would write
// acks for members whose own settlement is then refused.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	var buf [64]uint64
	var cur *consumer
	ts, lost := buf[:0], 0
	for _, h := range handles {
		if x := h.(*handle); x.c.lost.Load() || cur != nil && x.c != cur {
			lost++
		} else {
			cur, ts = x.c, append(ts, x.tag)
		}
	}
	if lost == 0 && cur != nil {
		lost = cur.acks.Settle(ts) // all or none
	}
	if lost > 0 {
		return fmt.Errorf("%d of %d, none acked: %w", lost, len(handles), errDeliveryLost)
	}
	return nil
}

// Abandon closes the channel of each record of a failed settlement, acks
// written first: RabbitMQ redelivers an unacked delivery only then.
func (s *sub) Abandon(handles []any) {
	for _, h := range handles {
		if c := h.(*handle).c; c.lost.CompareAndSwap(false, true) {
			c.abandoned.Store(true)
			go c.shut()
		}
	}
}

// FlushAcks writes every ack SendAcks recorded (after a loss there is
// nothing to write: the broker redelivers).
func (s *sub) FlushAcks(context.Context) error {
	cur := s.cur.Load() // set before Subscribe returned
	if err := cur.acks.Flush(); err != nil && !cur.lost.Load() {
		return fmt.Errorf("amqp: flush acks of %s: %w: %w", s.queue, err, errDeliveryLost)
	}
	return nil
}

// SendRequeueCopies publishes the requeue copies to the tail of the
// subscription's own queue. A delayed one is held by the portable layer:
// through a delay queue it would wait on dead-lettering.
func (s *sub) SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error {
	return s.c.publish(ctx, len(msgs), func(i int) item {
		return item{key: s.queue, pub: encode(msgs[i].Headers, msgs[i].Payload), mandatory: true}
	})
}

// Close closes the channel: the broker requeues every unacked record. A
// BROADCAST queue without InstanceTTL is deleted.
func (s *sub) Close(ctx context.Context) error {
	err := s.cons.Close(ctx, (*consumer).shut)
	if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
		err = errors.Join(err, s.c.subC.with(ctx, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(s.queue, false, false, false)
			return err
		}))
	}
	if err != nil {
		return fmt.Errorf("amqp: stop %s: %w", s.queue, err)
	}
	return nil
}
