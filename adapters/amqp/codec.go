package amqp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// headerDelay selects a delay queue on the delay exchange.
const headerDelay = "sluice-delay-ms"

// encode builds the persistent AMQP publishing of an envelope: the id,
// content type, correlation id and type travel as the AMQP properties made
// for them when they fit (255 bytes), every other header as a string.
func encode(h ports.Headers, payload []byte) amqp.Publishing {
	p := amqp.Publishing{Body: payload, DeliveryMode: amqp.Persistent}
	for _, x := range h {
		if f := property(&p, x.Name); f != nil && *f == "" && x.Value != "" && len(x.Value) <= 255 {
			*f = x.Value
		} else if p.Headers == nil { // a table only for a header no property carries
			p.Headers = amqp.Table{x.Name: x.Value}
		} else {
			p.Headers[x.Name] = x.Value
		}
	}
	return p
}

// property returns the AMQP property that carries envelope header k.
func property(p *amqp.Publishing, k string) *string {
	switch k {
	case ports.HeaderID:
		return &p.MessageId
	case ports.HeaderContentType:
		return &p.ContentType
	case ports.HeaderCorrelationID:
		return &p.CorrelationId
	case ports.HeaderType:
		return &p.Type
	}
	return nil
}

// decoded is what the adapter learns from one AMQP delivery.
type decoded struct {
	headers ports.Headers
	facts   ports.FactMap // broker headers; nil when none
	returns int           // x-delivery-count (quorum queues), else 1 if redelivered
}

// decode converts AMQP headers to envelope headers; broker headers
// (x-death, ...) go to facts, other non-string values are rendered.
func decode(d *amqp.Delivery) decoded {
	out := decoded{headers: make(ports.Headers, 0, len(d.Headers)+4)}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok && !isBrokerHeader(k) {
			out.headers = append(out.headers, ports.Header{Name: k, Value: s}) // a table's names are unique
		} else if n, err := strconv.Atoi(render(v)); k == "x-delivery-count" && err == nil && n >= 0 {
			out.returns = n
		} else if strings.HasPrefix(k, "x-") { // RabbitMQ's, or another plugin's
			out.fact(k, render(v))
		} else {
			out.headers = append(out.headers, ports.Header{Name: k, Value: render(v)})
		}
	}
	out.headers.Del(headerDelay)
	if d.Redelivered {
		out.returns = max(out.returns, 1)
		out.fact("amqp.redelivered", "true")
	}
	p := amqp.Publishing{MessageId: d.MessageId, ContentType: d.ContentType, CorrelationId: d.CorrelationId, Type: d.Type}
	for _, k := range [...]string{ports.HeaderID, ports.HeaderContentType, ports.HeaderCorrelationID, ports.HeaderType} {
		if v := *property(&p, k); v != "" && out.headers.Get(k) == "" {
			out.headers.Set(k, v)
		}
	}
	return out
}

// isBrokerHeader reports the headers RabbitMQ adds.
func isBrokerHeader(k string) bool {
	switch k {
	case "x-death", "x-delivery-count", "x-received-from", "x-shovelled", "x-shovelled-timestamp":
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

func (d *decoded) fact(k, v string) {
	if d.facts == nil {
		d.facts = make(map[string]string, 4)
	}
	d.facts[k] = v
}

// render writes an AMQP field value as text.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", x.Value, x.Scale)
	}
	return fmt.Sprint(v)
}

// Interop is the adapter's topology for another AMQP 0-9-1 client that
// exchanges messages with it (adapters/watermill/wmamqp builds a
// watermill-amqp configuration from it).
type Interop struct {
	// Exchange is the namespace's durable direct exchange: a topic's
	// messages are published to it with RoutingKey(topic).
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

// Queue is the durable queue of the LoadBalance group of topic, declared
// with QueueArgs and bound to Exchange under RoutingKey(topic).
func (in *Interop) Queue(topic ports.Topic, group string) string {
	return in.topo.queue(topic, "lb", group)
}

// QueueArgs are a group queue's declaration arguments.
func (in *Interop) QueueArgs() amqp.Table { return in.topo.queueArgs(0) }

// RoutingKey is the routing key of topic's messages on Exchange.
func (in *Interop) RoutingKey(topic ports.Topic) string { return topic.Physical("..") }

// Encode is the persistent publishing Send makes of an envelope.
func Encode(h ports.Headers, payload []byte) amqp.Publishing { return encode(h, payload) }

// Decode returns the envelope headers of d, as a subscription reads them.
func Decode(d *amqp.Delivery) ports.Headers {
	h := decode(d).headers
	h.Del(ports.HeaderRedeliveryCount) // the requeue copies' count, which the portable layer takes
	return h
}
