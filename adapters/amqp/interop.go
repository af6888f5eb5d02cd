package amqp

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// Interop is the adapter's topology for another AMQP 0-9-1 client that
// exchanges messages with it (adapters/watermill/wmamqp builds a
// watermill-amqp configuration from it).
type Interop struct {
	// Exchange is the namespace's direct exchange: a topic's messages are
	// published to it with the topic as routing key.
	Exchange string
	topo     *topology
}

// NewInterop validates o; its Namespace and QueueType shape the names.
func NewInterop(o Options) (*Interop, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	t := newTopology(o)
	return &Interop{Exchange: t.topics, topo: t}, nil
}

// Queue is the durable queue of the LoadBalance group of topic.
func (in *Interop) Queue(topic ports.Topic, group string) string {
	return in.topo.queue(topic, "lb", group)
}

// QueueArgs are a group queue's declaration arguments.
func (in *Interop) QueueArgs() amqp.Table { return in.topo.queueArgs(0) }

// DeclareExchanges declares the adapter's exchanges (idempotent).
func (in *Interop) DeclareExchanges(ch *amqp.Channel) error { return in.topo.declareExchanges(ch) }

// DeclareQueue declares the durable queue with args, bound under topic.
func (in *Interop) DeclareQueue(ch *amqp.Channel, queue string, topic ports.Topic, args amqp.Table) error {
	return queueDecl{name: queue, durable: true, args: args, binds: [][2]string{{in.Exchange, topic.Physical("..")}}}.declare(ch)
}

// Encode is the persistent publishing Send makes of an envelope.
func Encode(h ports.Headers, payload []byte) amqp.Publishing { return encode(h, payload) }

// Decode returns the envelope headers of d, as a subscription reads them.
func Decode(d *amqp.Delivery) ports.Headers {
	h := decode(d).headers
	delete(h, ports.HeaderRedeliveryCount) // the requeue copies' count, which the portable layer takes
	return h
}
