package pulsar

import (
	"context"
	"fmt"
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// sub is one Pulsar consumer of a Shared subscription. Its handles are
// the received pulsarclient.Message values.
type sub struct {
	c        *conn
	name     string // Pulsar subscription name
	consumer pulsarclient.Consumer
	// keep: Close leaves the subscription (LoadBalance groups, Broadcast
	// instances with an InstanceTTL); otherwise Close unsubscribes it.
	keep  bool
	early []pulsarclient.Message // received while a best-effort Subscribe waited for its probe
	recs  []driver.Record        // reused by ReceiveBatch
}

var (
	_ driver.Subscription = (*sub)(nil)
	_ driver.Requeuer     = (*sub)(nil)
)

// Subscribe creates (or joins) the Shared subscription of spec and returns
// once the broker registered the consumer. Its receiver queue is InFlight;
// a negative ack is redelivered after RequeueTick.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	topic, err := c.physicalTopic(spec.Topic)
	if err != nil {
		return nil, err
	}
	if spec.QoS == ports.BestEffort {
		topic = twin(topic)
	}
	s := &sub{c: c, name: c.subscriptionOf(spec), keep: spec.Mode == ports.LoadBalance || spec.InstanceTTL > 0}
	if err := c.checkInstanceFree(ctx, spec, topic, s.name); err != nil { // topology.go
		return nil, err
	}
	position := pulsarclient.SubscriptionPositionLatest
	if spec.Start == ports.StartEarliest {
		position = pulsarclient.SubscriptionPositionEarliest
	}
	precision := int64(0) // no trimming of nack deadlines: never redeliver early
	s.consumer, err = c.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic: topic, SubscriptionName: s.name, Type: pulsarclient.Shared,
		SubscriptionInitialPosition: position, ReceiverQueueSize: spec.InFlight,
		AckWithResponse: true, NackRedeliveryDelay: c.o.RequeueTick, NackPrecisionBit: &precision,
	})
	if err != nil {
		return nil, err
	}
	if spec.QoS == ports.BestEffort {
		if err := s.awaitPermits(ctx, topic); err != nil {
			s.consumer.Close()
			return nil, err
		}
	}
	return s, nil
}

// subscribe calls client.Subscribe, which blocks without a context, bounded
// by ctx. A consumer that arrives after ctx ended is closed.
func (c *conn) subscribe(ctx context.Context, opts pulsarclient.ConsumerOptions) (pulsarclient.Consumer, error) {
	type result struct {
		c   pulsarclient.Consumer
		err error
	}
	if c.isClosed() {
		return nil, ports.ErrClosed
	}
	res := make(chan result) // unbuffered: a result nobody takes is closed below
	c.bg.Go(func() {
		cons, err := c.client.Subscribe(opts)
		select {
		case res <- result{cons, err}:
		case <-ctx.Done():
			if cons != nil {
				cons.Close()
			}
		}
	})
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("subscribe %s to %s: %w", opts.SubscriptionName, opts.Topic, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ReceiveBatch reads the consumer's channel (its receiver queue): it
// blocks for the first message, then takes up to max without blocking.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	s.recs = s.recs[:0]
	for ; len(s.early) > 0 && len(s.recs) < max; s.early = s.early[1:] {
		s.add(s.early[0], time.Now())
	}
	for len(s.recs) == 0 {
		select {
		case cm, ok := <-s.consumer.Chan():
			if !ok {
				return nil, fmt.Errorf("consumer of %s closed: %w", s.name, ports.ErrClosed)
			}
			s.add(cm.Message, time.Now())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for len(s.recs) < max {
		select {
		case cm, ok := <-s.consumer.Chan():
			if !ok {
				return s.recs, nil
			}
			s.add(cm.Message, time.Now())
		default:
			return s.recs, nil
		}
	}
	return s.recs, nil
}

// add appends msg as a record; a best-effort Subscribe's probe is acked
// unseen.
func (s *sub) add(msg pulsarclient.Message, now time.Time) {
	if _, probe := msg.Properties()[ProbeProperty]; probe {
		_ = s.consumer.Ack(msg)
		return
	}
	mid := msg.ID().String()
	s.recs = append(s.recs, driver.Record{
		Message:         ports.Message{Key: msg.Key(), Payload: msg.Payload(), Headers: ports.HeadersFromMap(msg.Properties())},
		BrokerID:        "pulsar:" + mid,
		RedeliveryCount: int(msg.RedeliveryCount()),
		Facts:           ports.NewFacts(&msgFacts{topic: msg.Topic(), sub: s.name, id: mid}),
		ReceivedAt:      now,
		Handle:          msg,
	})
}

// SendAcks acknowledges the round in one command (AckIDList) and returns
// once the broker answered (the consumer runs with AckWithResponse). A
// message reassembled from chunks goes by AckIDList even alone: the
// client's AckID of a chunk message id acks each chunk without waiting
// for the broker's answer.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	var err error
	if id := handles[0].(pulsarclient.Message).ID(); len(handles) == 1 && !isChunked(id) {
		err = s.consumer.AckID(id)
	} else {
		err = s.consumer.AckIDList(kit.Keys(handles, pulsarclient.Message.ID))
	}
	if err != nil {
		// The ack command may have reached the broker before its answer
		// was lost: the messages are acked, or redelivered.
		return fmt.Errorf("ack %d message(s) on %s: %w: %w", len(handles), s.name, ports.ErrSettleInDoubt, err)
	}
	return nil
}

// SendRequeues negatively acknowledges each message: the broker redelivers
// it with its redelivery count increased, RequeueTick later (the portable
// layer held a longer delay). NackID of a message reassembled from chunks
// nacks every chunk, so it comes back whole. Nack does no I/O.
func (s *sub) SendRequeues(_ context.Context, handles []any, _ time.Duration) error {
	for _, id := range kit.Keys(handles, pulsarclient.Message.ID) {
		s.consumer.NackID(id)
	}
	return nil
}

// isChunked reports whether id is the id of a message the client
// reassembled from chunks. The client's chunk message id type is
// unexported; its String form (pulsar-client-go v0.19.0) is
// "<first chunk>;<last chunk>", which no other message id has.
func isChunked(id pulsarclient.MessageID) bool { return strings.Contains(id.String(), ";") }

// Close closes the consumer, after unsubscribing a Broadcast instance
// without InstanceTTL (which deletes its copy): the broker redelivers
// every message not acknowledged. It acknowledges nothing.
func (s *sub) Close(context.Context) error {
	var err error
	if !s.keep {
		if uerr := s.consumer.Unsubscribe(); uerr != nil {
			err = fmt.Errorf("unsubscribe broadcast instance %s: %w", s.name, uerr)
		}
	}
	s.consumer.Close()
	return err
}

// msgFacts are a message's facts (ports.FactSource).
type msgFacts struct{ topic, sub, id string }

func (f *msgFacts) Facts(yield func(key, value string) bool) {
	_ = yield("pulsar.topic", f.topic) && yield("pulsar.subscription", f.sub) && yield("pulsar.message-id", f.id)
}
