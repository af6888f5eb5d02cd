package amqp

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// WatermillAMQPConfig returns a watermill-amqp configuration that speaks
// this adapter's wire format and topology, so that a watermill-amqp
// Publisher or Subscriber in another service exchanges messages with
// sluice (its subscribers join the LOAD_BALANCE group's queue). o supplies
// URL, TLS, Namespace and QueueType; group names the subscribers' group.
// It is for interoperation, not speed (prefetch 1, one confirm at a
// time); within sluice, use the Adapter through adapters/watermill.
func WatermillAMQPConfig(o Options, group string) (wamqp.Config, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return wamqp.Config{}, err
	}
	if group == "" {
		return wamqp.Config{}, &ports.ValueError{Field: "group", Reason: "is required"}
	}
	topo := newTopology(o)
	return wamqp.Config{
		Connection: wamqp.ConnectionConfig{AmqpURI: o.URL, TLSConfig: o.TLS},
		Marshaler:  WatermillAMQPMarshaler{},
		Exchange: wamqp.ExchangeConfig{
			GenerateName: wamqp.GenerateExchangeNameConstant(topo.topics),
			Type:         amqp.ExchangeDirect,
			Durable:      true,
		},
		Queue: wamqp.QueueConfig{
			GenerateName: func(topic string) string { return topo.queue(ports.Topic(topic), "lb", group) },
			Durable:      true,
			Arguments:    topo.queueArgs(0),
		},
		QueueBind: wamqp.QueueBindConfig{GenerateRoutingKey: func(topic string) string { return topic }},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ConfirmDelivery:    true,
			ChannelPoolSize:    1,
		},
		Consume:         wamqp.ConsumeConfig{Qos: wamqp.QosConfig{PrefetchCount: 1}},
		TopologyBuilder: watermillTopology{topo: topo},
	}, nil
}

// watermillTopology declares the queue bound under its topic, as a sluice
// subscription does.
type watermillTopology struct{ topo *topology }

func (w watermillTopology) ExchangeDeclare(ch *amqp.Channel, name string, _ wamqp.Config) error {
	if name != w.topo.topics {
		return fmt.Errorf("amqp: exchange %q is not this namespace's %q", name, w.topo.topics)
	}
	return w.topo.declareExchanges(ch)
}

func (w watermillTopology) BuildTopology(ch *amqp.Channel, p wamqp.BuildTopologyParams, c wamqp.Config, _ watermill.LoggerAdapter) error {
	if err := w.ExchangeDeclare(ch, p.ExchangeName, c); err != nil {
		return err
	}
	t := w.topo.topics
	return queueDecl{name: p.QueueName, durable: true, args: c.Queue.Arguments, binds: [][2]string{{t, ports.Topic(p.Topic).Physical("..")}}}.declare(ch)
}

// WatermillAMQPMarshaler is a watermill-amqp Marshaler for the sluice
// envelope: the message UUID is the envelope id, the metadata its headers.
// Unmarshal never fails: non-string AMQP headers are rendered as text or
// left out, and a malformed header is kept for the handler to judge.
type WatermillAMQPMarshaler struct{}

var _ wamqp.Marshaler = WatermillAMQPMarshaler{}

// Marshal encodes msg with the sluice envelope (stamped like Send).
func (WatermillAMQPMarshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	m := wmbridge.Messages("", msg)[0]
	m.Stamp(time.Now())
	return encode(m.Headers, m.Payload), nil
}

// Unmarshal decodes d into a Watermill message whose metadata are the
// envelope headers.
func (WatermillAMQPMarshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	dec := decode(&d)
	return wmbridge.Message(dec.headers[ports.HeaderID], d.Body, dec.headers), nil
}
