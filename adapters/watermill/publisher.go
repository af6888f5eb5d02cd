// Package wmbridge (import path github.com/sluicemq/sluice/adapters/watermill)
// is the Watermill bridge of every sluice adapter: a Watermill
// message.Publisher over any ports.Sender and a message.Subscriber over any
// ports.Adapter, so a Watermill router runs on the adapter's confirmed
// sends and settlement paths. It links Watermill's core only, no broker
// client. The package is named wmbridge so that it does not shadow
// Watermill's own package "watermill" in programs that import both.
//
// A Watermill topic is a sluice logical topic. The message UUID travels as
// the envelope id (ports.HeaderID) and the metadata as envelope headers, so
// sluice consumers and Watermill subscribers see the same message. On the
// way in, a delivery's id becomes the UUID and its headers the metadata.
//
// Settlement: Ack is the delivery's ACK; Nack is a REQUEUE with the
// redelivery count incremented, after SubscriberConfig.NackDelay or the
// NackBackoff policy; a delivery whose envelope the adapter could not read
// is dead-lettered (ports.Poison) before Watermill sees it, as the flow core
// does; Close or a cancelled context hand every unsettled message back to
// the broker without acking or nacking it.
package wmbridge

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// Publisher is a Watermill message.Publisher over a sluice sender: Publish
// returns when the broker confirmed every message, as ports.Sender.Send
// does.
type Publisher struct {
	s      ports.Sender
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher over s (typically an adapter). Closing
// the publisher does not close s.
func NewPublisher(s ports.Sender) *Publisher { return &Publisher{s: s} }

// Publish sends msgs to topic in one confirmed Send. A message's UUID
// becomes its HeaderID (metadata HeaderID is used only when the UUID is
// empty), its metadata the headers, and the metadata value of
// ports.HeaderPartitionKey its partition key. Publish returns the joined
// *ports.SendError of every message the broker did not confirm
// (ports.SendErrors lists them), or ports.ErrClosed after Close.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ports.ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	return p.s.Send(context.Background(), Messages(topic, msgs...)...)
}

// Messages converts Watermill messages to sluice messages for topic, as
// Publish does. It is exported for adapters whose Watermill publisher
// sends through a path of its own.
func Messages(topic string, msgs ...*message.Message) []ports.Message {
	out := make([]ports.Message, len(msgs))
	for i, m := range msgs {
		h := make(ports.Headers, 0, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			h.Set(k, v)
		}
		if m.UUID != "" {
			h.Set(ports.HeaderID, m.UUID)
		}
		out[i] = ports.Message{Topic: ports.Topic(topic), Key: h.Get(ports.HeaderPartitionKey), Payload: m.Payload, Headers: h}
	}
	return out
}

// Close makes later Publish calls fail with ports.ErrClosed. It is
// idempotent and does not close the sender.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
