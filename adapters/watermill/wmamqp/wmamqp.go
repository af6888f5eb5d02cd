// Package wmamqp lets watermill-amqp services exchange messages with
// sluice's RabbitMQ adapter (adapters/amqp): Config returns a
// watermill-amqp configuration that speaks the adapter's wire format and
// topology. It is for interoperation, not speed; within sluice, use the
// amqp Adapter through the Watermill bridge (adapters/watermill).
package wmamqp

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// Config returns a watermill-amqp configuration that speaks the amqp
// adapter's wire format and topology, so that a watermill-amqp Publisher
// or Subscriber in another service exchanges messages with sluice (its
// subscribers join the LOAD_BALANCE group's queue). o supplies URL, TLS,
// Namespace and QueueType; group names the subscribers' group. It is for
// interoperation, not speed (prefetch 1, one confirm at a time).
func Config(o amqp.Options, group string) (wamqp.Config, error) {
	if group == "" {
		return wamqp.Config{}, &ports.ValueError{Field: "group", Reason: "is required"}
	}
	in, err := amqp.NewInterop(o)
	if err != nil {
		return wamqp.Config{}, err
	}
	return wamqp.Config{
		Connection: wamqp.ConnectionConfig{AmqpURI: o.URL, TLSConfig: o.TLS},
		Marshaler:  Marshaler{},
		Exchange: wamqp.ExchangeConfig{
			GenerateName: wamqp.GenerateExchangeNameConstant(in.Exchange),
			Type:         amqp091.ExchangeDirect,
			Durable:      true,
		},
		Queue: wamqp.QueueConfig{
			GenerateName: func(topic string) string { return in.Queue(ports.Topic(topic), group) },
			Durable:      true,
			Arguments:    in.QueueArgs(),
		},
		QueueBind: wamqp.QueueBindConfig{GenerateRoutingKey: func(topic string) string { return in.RoutingKey(ports.Topic(topic)) }},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return in.RoutingKey(ports.Topic(topic)) },
			ConfirmDelivery:    true,
			ChannelPoolSize:    1,
		},
		Consume:         wamqp.ConsumeConfig{Qos: wamqp.QosConfig{PrefetchCount: 1}},
		TopologyBuilder: topology{in},
	}, nil
}

// topology declares the queue bound under its topic, as a sluice
// subscription does.
type topology struct{ in *amqp.Interop }

func (t topology) ExchangeDeclare(ch *amqp091.Channel, name string, _ wamqp.Config) error {
	if name != t.in.Exchange {
		return fmt.Errorf("amqp: exchange %q is not this namespace's %q", name, t.in.Exchange)
	}
	return ch.ExchangeDeclare(name, amqp091.ExchangeDirect, true, false, false, false, nil)
}

func (t topology) BuildTopology(ch *amqp091.Channel, p wamqp.BuildTopologyParams, c wamqp.Config, _ watermill.LoggerAdapter) error {
	if err := t.ExchangeDeclare(ch, p.ExchangeName, c); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(p.QueueName, true, false, false, false, c.Queue.Arguments); err != nil {
		return err
	}
	return ch.QueueBind(p.QueueName, t.in.RoutingKey(ports.Topic(p.Topic)), t.in.Exchange, false, nil)
}

// Marshaler is a watermill-amqp Marshaler for the sluice envelope: the
// message UUID is the envelope id, the metadata its headers. Unmarshal
// never fails: non-string AMQP headers are rendered as text or left out,
// and a malformed header is kept for the handler to judge.
type Marshaler struct{}

var _ wamqp.Marshaler = Marshaler{}

// Marshal encodes msg with the sluice envelope (stamped like Send).
func (Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	m := wmbridge.Messages("", msg)[0]
	m.Stamp()
	return amqp.Encode(m.Headers, m.Payload), nil
}

// Unmarshal decodes d into a Watermill message whose metadata are the
// envelope headers.
func (Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	h := amqp.Decode(&d)
	return wmbridge.Message(h.Get(ports.HeaderID), d.Body, h), nil
}
