package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// sub is one physical consumer of a SubscriptionSpec: a queue, consumed
// on a channel of the consume connection. ReceiveBatch reads amqp091's
// delivery channel itself; when the channel or connection is lost it
// returns the loss (the portable layer reports it and retries) and the
// next call declares the queue and consumes again. Nothing is acked on
// the way: the broker redelivers what was unsettled.
type sub struct {
	c            *conn
	spec         ports.SubscriptionSpec
	queue        string
	expires      time.Duration // x-expires of the queue; 0: none
	deleteOnStop bool
	dlGroup      string      // the dead-letter topic's group that keeps dead letters
	adopted      bool        // an adopted queue (Options.Existing): used passively
	bestEffort   bool        // a non-durable classic queue
	routeBound   atomic.Bool // an adopted queue's requeue route is bound (bindRequeueRoute)

	mu     sync.Mutex // guards cur, its unacked tags, and the acks written on it
	cur    *consumer
	closed bool
	recs   []driver.Record // reused by ReceiveBatch
}

var (
	_ driver.Subscription = (*sub)(nil)
	_ driver.Requeuer     = (*sub)(nil)
)

// consumer is one channel consuming the queue.
type consumer struct {
	ch        *amqp.Channel
	dels      <-chan amqp.Delivery
	closed    <-chan *amqp.Error
	cancelled <-chan string
	unacked   []uint64 // delivery tags handed out and not acked, ascending
}

// handle is a record's settlement handle: its channel and delivery tag,
// and what a requeue copy is made of.
type handle struct {
	c       *consumer
	tag     uint64
	headers ports.Headers
	payload []byte
	count   int // the redelivery count reported
	qos     uint8
}

// errDeliveryLost settles nothing: the channel that carried the delivery
// was lost, and the broker redelivers it.
var errDeliveryLost = errors.New("amqp: the channel that carried this delivery was lost; the broker redelivers it")

// Subscribe declares the subscription's queue (LOAD_BALANCE: a durable
// queue shared by the group; BROADCAST: a queue per instance with
// x-expires; an adopted queue is checked, never declared), binds it to
// the topic, starts consuming with a prefetch of spec.InFlight and returns
// once the broker confirmed the consumer.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, queue: c.topo.queueFor(spec), dlGroup: spec.Group, bestEffort: spec.QoS == ports.BestEffort}
	if s.dlGroup == "" {
		s.dlGroup = "dead-letters"
	}
	if q, ok := c.existing.queue(spec.Topic, spec.Group); ok && spec.Mode == ports.LoadBalance {
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
	// A quorum queue counts the consumer of a channel that has just closed
	// (a Stop right before) for a moment: retry a refused instance briefly.
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
	qt, exact := string(c.opts.QueueType), c.caps.ExactRedeliveryCount
	if s.bestEffort {
		qt, exact = string(Classic), false
	} else if s.adopted {
		qt = c.queueType(ctx, s.queue)
		exact = qt == string(Quorum)
	}
	log := c.opts.Logger.Debug
	if s.adopted && exact != c.caps.ExactRedeliveryCount {
		log = c.opts.Logger.Info
	}
	log("sluice amqp: subscribed", "queue", s.queue, "adopted", s.adopted, "queue_type", qt, "exact_redelivery_count", exact)
	return s, nil
}

// broadcastNames refuses a BROADCAST group or instance with a '/': in
// "<ns>/<topic>/bc/<group>/<instance>" it would let two instances name one
// queue and share one copy silently.
func broadcastNames(spec ports.SubscriptionSpec) error {
	for _, f := range [][2]string{{"Group", spec.Group}, {"Instance", spec.Instance}} {
		if spec.Mode == ports.Broadcast && strings.Contains(f[1], "/") {
			return &ports.ValueError{Field: "SubscriptionSpec." + f[0], Reason: fmt.Sprintf("%q: a BROADCAST %s must not contain '/' on amqp (group and instance are the last two '/'-separated parts of the instance's queue name)", f[1], strings.ToLower(f[0]))}
		}
	}
	return nil
}

// instanceSettle is how long the first Subscribe of a BROADCAST instance
// retries while its queue still shows another consumer.
const instanceSettle = 2 * time.Second

// establish declares the topology, opens a channel with the prefetch and
// starts consuming.
func (s *sub) establish(ctx context.Context) (*consumer, error) {
	ch, err := s.c.subC.channel(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*consumer, error) {
		ch.Close()
		return nil, err
	}
	if err := s.declare(ctx, &ch); err != nil {
		return fail(err)
	}
	if err := ch.Qos(s.spec.InFlight, 0, false); err != nil {
		return fail(fmt.Errorf("set prefetch %d: %w", s.spec.InFlight, err))
	}
	cur := &consumer{ch: ch, closed: ch.NotifyClose(make(chan *amqp.Error, 1)), cancelled: ch.NotifyCancel(make(chan string, 1))}
	// A BROADCAST queue belongs to one instance: its consumer is exclusive
	// (a classic queue refuses a second one with ACCESS_REFUSED); quorum
	// queues ignore that flag, so the consumer count is checked before and
	// after consuming.
	exclusive := s.spec.Mode == ports.Broadcast
	if exclusive {
		if err := s.checkAlone(ch, 0); err != nil {
			return fail(err)
		}
	}
	cur.dels, err = ch.Consume(s.queue, "sluice-"+ports.NewID(), false, exclusive, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if exclusive && errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
			return fail(s.instanceInUse(err))
		}
		return fail(fmt.Errorf("consume %q: %w", s.queue, err))
	}
	if exclusive {
		if err := s.checkAlone(ch, 1); err != nil {
			return fail(err) // closing cancels the consumer
		}
	}
	return cur, nil
}

// declare declares the subscription's queue with the adapter's queue
// type, the topic's declared retention and length (DeclareTopic),
// x-single-active-consumer and x-expires (a best-effort queue is a
// non-durable classic one), and, unless dead-lettering is off, the queue
// that keeps the dead-letter topic's messages for the group. A queue that
// exists with other arguments is left as it is: a *ports.RedeclareError
// names each one. An adopted queue is only checked to exist.
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
	if s.spec.DisableDeadLetter || s.bestEffort || len(dlt) > 200 {
		return nil
	}
	if _, ok := s.c.existing.topic(dlt); ok {
		return nil // an adopted dead-letter topic: its queues exist already
	}
	return invalid(s.c.declareOn(ctx, s.c.subC, ch, t.queueDecl(t.lbQueue(dlt, s.dlGroup), dlt, queueShape{}), dlt, true))
}

// invalid marks a broker refusal of a declaration (a queue that exists
// with other arguments, a forbidden name) as ports.ErrInvalid.
func invalid(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused) {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return err
}

// checkAlone fails with instanceInUse when the BROADCAST queue has more
// than own consumers (own: 0 before consuming, 1 after).
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

// instanceInUse is the error for a BROADCAST queue consumed by another
// subscription with the same Instance.
func (s *sub) instanceInUse(cause error) error {
	return fmt.Errorf("%w: %w", &ports.InstanceSharedError{
		Instance: s.spec.Instance,
		Where:    fmt.Sprintf("a running consumer on queue %q: two running instances share the same Instance", s.queue),
	}, cause)
}

// ReceiveBatch returns what the broker pushed (up to max, at least one),
// reading amqp091's delivery channel; the prefetch (spec.InFlight) bounds
// what the broker pushes. After a loss it consumes again first.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	s.mu.Lock()
	cur, closed := s.cur, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ports.ErrClosed
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
	var ok bool
	select {
	case d, ok = <-cur.dels:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if !ok {
		return nil, s.lose(cur)
	}
	now := time.Now()
	recs := s.recs[:0]
	for {
		recs = append(recs, s.record(cur, &d, now))
		if len(recs) == max {
			break
		}
		select {
		case d, ok = <-cur.dels:
		default:
			ok = false
		}
		if !ok {
			break // a closed channel is seen by the next call
		}
	}
	s.mu.Lock()
	for _, r := range recs {
		cur.unacked = append(cur.unacked, r.Handle.(*handle).tag)
	}
	s.mu.Unlock()
	s.recs = recs
	return recs, nil
}

// record converts d. An envelope that cannot be read (a malformed
// redelivery count) sets Record.Err: the core dead-letters it as poison.
func (s *sub) record(cur *consumer, d *amqp.Delivery, now time.Time) driver.Record {
	dec := decode(d)
	n := dec.requeues + dec.returns
	return driver.Record{
		Message:         ports.Message{Topic: s.spec.Topic, Key: dec.headers[ports.HeaderPartitionKey], Payload: d.Body, Headers: dec.headers},
		RedeliveryCount: n,
		Facts:           dec.facts,
		ReceivedAt:      now,
		Err:             dec.err,
		Handle:          &handle{c: cur, tag: d.DeliveryTag, headers: dec.headers, payload: d.Body, count: n, qos: d.DeliveryMode},
	}
}

// lose forgets cur after its delivery channel closed and says why.
func (s *sub) lose(cur *consumer) error {
	s.mu.Lock()
	if s.cur == cur {
		s.cur = nil
	}
	s.mu.Unlock()
	err := &lostError{err: fmt.Errorf("amqp: subscription %s lost its channel", s.queue), code: ports.ErrUnreachable}
	select {
	case tag := <-cur.cancelled:
		err = &lostError{err: fmt.Errorf("amqp: subscription %s: consumer %s cancelled by the broker (queue deleted?)", s.queue, tag)}
	default:
		select {
		case e := <-cur.closed:
			if e != nil {
				err.err = fmt.Errorf("%w: %w", err.err, e)
			}
		default:
		}
	}
	cur.ch.Close() // after a broker cancel: give back what it holds
	return err
}

// SendAcks acks the records of handles: one basic.ack with multiple set
// when they are the lowest unacked delivery tags of the channel, one
// basic.ack each otherwise (a multiple-ack would also ack the older
// records still out). A handle of a lost channel acks nothing.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	var buf [64]uint64
	tags := buf[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur
	for _, h := range handles {
		x := h.(*handle)
		if x.c != cur {
			return errDeliveryLost
		}
		tags = append(tags, x.tag)
	}
	slices.Sort(tags)
	if n := len(tags); n > 1 && n <= len(cur.unacked) && slices.Equal(tags, cur.unacked[:n]) {
		if err := cur.ch.Ack(tags[n-1], true); err != nil {
			return errors.Join(err, errDeliveryLost)
		}
		cur.unacked = append(cur.unacked[:0], cur.unacked[n:]...)
		return nil
	}
	for _, tag := range tags {
		if err := cur.ch.Ack(tag, false); err != nil {
			return errors.Join(err, errDeliveryLost)
		}
		if i, ok := slices.BinarySearch(cur.unacked, tag); ok {
			cur.unacked = slices.Delete(cur.unacked, i, i+1)
		}
	}
	return nil
}

// SendRequeues publishes a copy of each record, with its redelivery count
// incremented, to the subscription's own queue — at its tail, or through a
// delay queue for delay — with a confirm, and acks the originals only when
// every copy is confirmed. A copy travels to this queue alone (a publish
// under the topic would reach every group), the count travels with it
// and stays exact, and a failing message does not loop at the head of the
// queue. A failed copy acks nothing.
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
		items[i].pub.DeliveryMode = x.qos
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

// Close closes the channel, so the broker requeues every unacked record;
// it acks nothing. A BROADCAST queue without InstanceTTL is deleted.
func (s *sub) Close(ctx context.Context) error {
	s.mu.Lock()
	cur := s.cur
	s.cur, s.closed = nil, true
	s.mu.Unlock()
	var errs []error
	if cur != nil {
		if err := cur.ch.Close(); err != nil && !isClosedErr(err) {
			errs = append(errs, fmt.Errorf("amqp: stop %s: close channel: %w", s.queue, err))
		}
	}
	if s.deleteOnStop {
		ch, err := s.c.subC.channel(ctx)
		if err == nil {
			_, err = ch.QueueDelete(s.queue, false, false, false)
			ch.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("amqp: delete queue %s: %w", s.queue, err))
		}
	}
	return errors.Join(errs...)
}
