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
	t := make(amqp.Table, len(h))
	for k, v := range h {
		if f := property(&p, k); f != nil && *f == "" && v != "" && len(v) <= 255 {
			*f = v
		} else {
			t[k] = v
		}
	}
	p.Headers = t
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

// decoded is what the adapter learns from one AMQP delivery. The count
// header of requeue copies stays in headers, for the portable layer.
type decoded struct {
	headers ports.Headers
	facts   map[string]string
	returns int // the broker's count: x-delivery-count (quorum queues), else 1 if redelivered
}

// decode converts AMQP headers to envelope headers; broker headers
// (x-death, ...) go to facts, other non-string values are rendered.
func decode(d *amqp.Delivery) decoded {
	out := decoded{headers: make(ports.Headers, len(d.Headers)+4)}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok && !isBrokerHeader(k) {
			out.headers[k] = s
		} else if n, err := strconv.Atoi(render(v)); k == "x-delivery-count" && err == nil && n >= 0 {
			out.returns = n
		} else if isBrokerHeader(k) || strings.HasPrefix(k, "x-") {
			out.fact(k, render(v))
		} else {
			out.headers[k] = render(v)
		}
	}
	delete(out.headers, headerDelay)
	if d.Redelivered {
		out.returns = max(out.returns, 1)
		out.fact("amqp.redelivered", "true")
	}
	p := amqp.Publishing{MessageId: d.MessageId, ContentType: d.ContentType, CorrelationId: d.CorrelationId, Type: d.Type}
	for _, k := range [...]string{ports.HeaderID, ports.HeaderContentType, ports.HeaderCorrelationID, ports.HeaderType} {
		if v := *property(&p, k); v != "" && out.headers[k] == "" {
			out.headers[k] = v
		}
	}
	return out
}

// isBrokerHeader reports headers that RabbitMQ itself adds.
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
