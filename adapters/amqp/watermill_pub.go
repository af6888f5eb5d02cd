package amqp

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over a sluice
// sender: Publish returns when the broker confirmed every message (the
// adapter's confirm channels, many confirms outstanding), not when the
// frames were written. A Watermill topic is a sluice logical topic; the
// message UUID travels as the envelope id (HeaderID) and the metadata as
// envelope headers, so sluice consumers and Watermill subscribers
// (NewWatermillSubscriber) see the same message.
type WatermillPublisher struct {
	s      ports.Sender
	closed atomic.Bool
}

var _ message.Publisher = (*WatermillPublisher)(nil)

// NewWatermillPublisher returns a publisher over s (typically an *Adapter).
// Closing the publisher does not close s.
func NewWatermillPublisher(s ports.Sender) *WatermillPublisher { return &WatermillPublisher{s: s} }

// Publish sends msgs to topic with confirms. It returns the joined
// *ports.SendError of every message the broker did not confirm.
func (p *WatermillPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ports.ErrClosed
	}
	out := make([]ports.Message, len(msgs))
	for i, m := range msgs {
		h := make(ports.Headers, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			h[k] = v
		}
		if h[ports.HeaderID] == "" && m.UUID != "" {
			h[ports.HeaderID] = m.UUID
		}
		out[i] = ports.Message{Topic: ports.Topic(topic), Payload: m.Payload, Headers: h}
	}
	return p.s.Send(context.Background(), out...)
}

// Close makes later Publish calls fail with ports.ErrClosed. It is
// idempotent.
func (p *WatermillPublisher) Close() error {
	p.closed.Store(true)
	return nil
}
