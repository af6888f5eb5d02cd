package amqp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// headerDelay is the header that selects a delay queue on the delay
// exchange. It is transport-internal and removed on receive.
const headerDelay = "sluice-delay-ms"

// brokerHeaderDeliveryCount is the quorum queue's count of earlier
// deliveries of this copy of a message.
const brokerHeaderDeliveryCount = "x-delivery-count"

// encode builds the AMQP publishing of an envelope. Four envelope headers
// travel as the AMQP properties made for them — HeaderID as message-id,
// HeaderContentType as content-type, HeaderCorrelationID as
// correlation-id, HeaderType as type — when they fit a property (255
// bytes); every other header travels as an AMQP string header under its
// envelope name. decode restores them, so the envelope is identical after
// the hop. Messages are persistent.
func encode(h ports.Headers, payload []byte) amqp.Publishing {
	p := amqp.Publishing{Body: payload, DeliveryMode: amqp.Persistent}
	t := make(amqp.Table, len(h))
	for k, v := range h {
		if !toProperty(&p, k, v) {
			t[k] = v
		}
	}
	p.Headers = t
	return p
}

// toProperty stores an envelope header in its AMQP property, if it has one
// and the value fits.
func toProperty(p *amqp.Publishing, k, v string) bool {
	if len(v) > 255 || v == "" {
		return false
	}
	switch k {
	case ports.HeaderID:
		p.MessageId = v
	case ports.HeaderContentType:
		p.ContentType = v
	case ports.HeaderCorrelationID:
		p.CorrelationId = v
	case ports.HeaderType:
		p.Type = v
	default:
		return false
	}
	return true
}

// fromProperties restores the envelope headers carried as properties
// (a header of the same name wins).
func fromProperties(h ports.Headers, d *amqp.Delivery) {
	for _, kv := range [...][2]string{
		{ports.HeaderID, d.MessageId},
		{ports.HeaderContentType, d.ContentType},
		{ports.HeaderCorrelationID, d.CorrelationId},
		{ports.HeaderType, d.Type},
	} {
		if kv[1] != "" && h[kv[0]] == "" {
			h[kv[0]] = kv[1]
		}
	}
}

// decoded is what the adapter learns from one AMQP delivery.
type decoded struct {
	headers ports.Headers
	facts   map[string]string
	// requeues is the sluice-redelivery-count header: how many times the
	// adapter requeued the message by republishing it.
	requeues int
	// returns is how many times the broker delivered this copy before:
	// x-delivery-count where present (quorum queues, exact), else 1 if
	// the redelivered flag is set (classic queues, a lower bound).
	returns int
	// err is set when a header is malformed; the delivery is poison
	// (Delivery.Err).
	err error
}

// decode converts AMQP headers to envelope headers. String headers are
// taken as they are. Broker headers (x-death, x-first-death-*,
// x-delivery-count, ...) are never rejected: they go to facts, and the
// delivery count is used for the redelivery count. Other non-string values
// from foreign publishers are rendered as text rather than refused.
func decode(d *amqp.Delivery) decoded {
	out := decoded{headers: make(ports.Headers, len(d.Headers)+4)}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok && !isBrokerHeader(k) {
			out.headers[k] = s
			continue
		}
		if k == brokerHeaderDeliveryCount {
			if n, ok := toInt(v); ok && n >= 0 {
				out.returns = int(n)
				continue
			}
		}
		if isBrokerHeader(k) || strings.HasPrefix(k, "x-") {
			out.fact(k, render(v))
			continue
		}
		out.headers[k] = render(v)
	}
	delete(out.headers, headerDelay)
	if d.Redelivered && out.returns == 0 {
		// A classic queue only says "redelivered": at least once before.
		// (A quorum queue's x-delivery-count is exact.)
		out.returns = 1
	}
	if d.Redelivered {
		out.fact("amqp.redelivered", "true")
	}
	fromProperties(out.headers, d)
	n, err := ports.RedeliveryCountFrom(out.headers)
	if err != nil {
		out.err = err
		return out
	}
	out.requeues = n
	if total := out.requeues + out.returns; total > 0 {
		out.headers[ports.HeaderRedeliveryCount] = strconv.Itoa(total)
	}
	return out
}

// isBrokerHeader reports headers that RabbitMQ itself adds (dead-lettering,
// quorum queue counts, shovels, federation).
func isBrokerHeader(k string) bool {
	switch k {
	case "x-death", brokerHeaderDeliveryCount, "x-received-from", "x-shovelled", "x-shovelled-timestamp":
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

// toInt reads an AMQP integer of any width.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// render writes an AMQP field value as text.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", x.Value, x.Scale)
	case amqp.Table:
		return fmt.Sprintf("%v", map[string]any(x))
	}
	if n, ok := toInt(v); ok {
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%v", v)
}
