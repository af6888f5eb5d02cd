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

// sub is one consumer of a SubscriptionSpec on the consume connection.
// ReceiveBatch reads amqp091's delivery channel itself; after a loss it
// returns the loss and the next call declares and consumes again.
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

var (
	_ driver.RequeueCopier = (*sub)(nil)
	_ driver.AckFlusher    = (*sub)(nil)
)

// consumer is one channel consuming the queue, lost once its deliveries
// ended or it was closed. Its ack writer writes the acks SendAcks records
// with one basic.ack(multiple) within ackInterval, or at once when half
// the prefetch waits.
type consumer struct {
	ch        *amqp.Channel
	dels      <-chan amqp.Delivery
	closed    <-chan *amqp.Error
	cancelled <-chan string
	lost      atomic.Bool
	acks      *kit.AckWriter
}

const ackInterval = 5 * time.Millisecond

// handle is a record's channel and delivery tag.
type handle struct {
	c   *consumer
	tag uint64
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
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		_, err = s.cons.Get(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: subscribe %s: %w", s.queue, err)
	}
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

// establish declares the queues and consumes. A BROADCAST consumer is
// exclusive, which quorum queues ignore: its consumer count is checked
// before and after consuming.
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
	if s.cur.Load() != nil {
		s.c.opts.Logger.Info("sluice amqp: subscription re-established", "queue", s.queue)
	}
	cur.acks = kit.NewAckWriter(ch.Ack, ackInterval, s.spec.InFlight/2)
	s.cur.Store(cur)
	return cur, nil
}

// shut stops the ack writer, writes what is settled (singly above an
// unsettled record: the broker requeues that one) and closes the channel.
func (c *consumer) shut() error {
	c.lost.Store(true)
	_ = c.acks.Stop() // a failure leaves them to be redelivered
	if err := c.ch.Close(); !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	return nil // closed already, with the connection or by the broker
}

// declare declares the subscription's queue (an adopted one is checked to
// exist) and, unless dead-lettering is off, the group's queue of the
// dead-letter topic. A refusal is ports.ErrInvalid.
func (s *sub) declare(ctx context.Context) error {
	t, dlt := s.c.topo, ports.DeadLetterTopic(s.spec.Topic)
	var err error
	if s.adopted {
		if err = s.c.subC.with(ctx, passive(s.queue)); err != nil {
			return fmt.Errorf("adopted queue %q (Options.Existing) does not exist; sluice never declares an adopted queue: %w", s.queue, err)
		}
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
	cur, err := s.cons.Get(ctx)
	if err != nil {
		return nil, err
	}
	if cur.acks.FlushIfFull(s.spec.InFlight) != nil {
		return nil, s.lose(cur)
	}
	dels, open, err := kit.Take(ctx, cur.dels, max, s.dels[:0])
	if err != nil {
		return nil, err
	}
	if len(dels) == 0 && !open { // a channel closed after deliveries is seen by the next call
		return nil, s.lose(cur)
	}
	now, recs := time.Now(), s.recs[:0]
	for i := range dels {
		d := &dels[i]
		cur.acks.Add(d.DeliveryTag)
		dec := decode(d)
		recs = append(recs, driver.Record{
			Message:         ports.Message{Topic: s.spec.Topic, Key: dec.headers[ports.HeaderPartitionKey], Payload: d.Body, Headers: dec.headers},
			RedeliveryCount: dec.returns, Facts: ports.NewFacts(ports.FactMap(dec.facts)), ReceivedAt: now,
			Handle: &handle{c: cur, tag: d.DeliveryTag},
		})
	}
	clear(dels)
	s.dels, s.recs = dels[:0], recs
	return recs, nil
}

// lose shuts cur, after its delivery channel closed, and says why: a
// retryable error, as the next receive consumes again.
func (s *sub) lose(cur *consumer) error {
	err := &ports.BrokerError{Op: "receive", Code: ports.ErrUnreachable, Retryable: true, Err: fmt.Errorf("amqp: subscription %s lost its channel", s.queue)}
	if tag, ok := recvNow(cur.cancelled); ok && tag != "" { // notified before the deliveries close
		err.Code, err.Err = nil, fmt.Errorf("amqp: subscription %s: consumer %s cancelled by the broker (queue deleted?)", s.queue, tag)
	} else if e, _ := recvNow(cur.closed); e != nil {
		err.Err = fmt.Errorf("%w: %w", err.Err, e)
	}
	_ = cur.shut() // after a broker cancel: give back what it holds
	return err
}

func recvNow[T any](c <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-c:
	default:
	}
	return v, ok
}

// SendAcks records the acks of handles, without I/O, for the consumer's
// ack writer (a record settled above an unsettled one waits for it, or
// for a full prefetch, FlushAcks or Close). It records all of them or
// none: a handle of a lost channel (or of another channel than the
// others), or acked already, cannot be acked, and then the error wraps
// driver.ErrRecordsLost and no ack is recorded. The caller settles the
// members of a failed round again one by one: an ack recorded in the
// failed round would be written to the broker while the member's own
// settlement is refused as acked already — reported failed, never
// redelivered.
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

// FlushAcks writes every ack SendAcks recorded, singly those above an
// unsettled record; the broker processes them before the channel's close.
// After a loss there is nothing to write: the broker redelivers.
func (s *sub) FlushAcks(context.Context) error {
	cur := s.cur.Load() // set before Subscribe returned
	if err := cur.acks.Flush(); err != nil && !cur.lost.Load() {
		return fmt.Errorf("amqp: flush acks of %s: %w: %w", s.queue, err, errDeliveryLost)
	}
	return nil
}

// SendRequeueCopies publishes the requeue copies (their count
// incremented) to the tail of the subscription's own queue: sent to the
// topic, they would reach every group. A delayed requeue is held by the
// portable layer and its copies published when due (DelayedRequeue is not
// declared): through a delay queue, a copy would depend on the broker's
// dead-lettering, which a broker restart can hold up for minutes.
func (s *sub) SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error {
	items := make([]item, len(msgs))
	for i := range msgs {
		items[i] = item{key: s.queue, pub: encode(msgs[i].Headers, msgs[i].Payload), mandatory: true}
	}
	return s.c.publish(ctx, items)
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
