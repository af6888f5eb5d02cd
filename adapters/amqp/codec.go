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

// encode builds the AMQP publishing of an envelope. Headers travel as AMQP
// string headers under their envelope names, unchanged; the message id,
// content type, correlation id and type are mirrored into the AMQP
// properties for tooling. Messages are persistent.
func encode(h ports.Headers, payload []byte) amqp.Publishing {
	t := make(amqp.Table, len(h))
	for k, v := range h {
		t[k] = v
	}
	return amqp.Publishing{
		Headers:       t,
		Body:          payload,
		DeliveryMode:  amqp.Persistent,
		MessageId:     h[ports.HeaderID],
		ContentType:   h[ports.HeaderContentType],
		CorrelationId: h[ports.HeaderCorrelationID],
		Type:          h[ports.HeaderType],
	}
}

// decoded is what the adapter learns from one AMQP delivery.
type decoded struct {
	headers ports.Headers
	facts   map[string]string
	// requeues is the sluice-redelivery-count header: how many times the
	// adapter requeued the message by republishing it.
	requeues int
	// returns is how many times the broker delivered this copy before
	// (exact on quorum queues, 0 or 1 on classic queues).
	returns int
	// err is set when a header is malformed; the delivery is poison.
	err error
}

// decode converts AMQP headers to envelope headers. String headers are
// taken as they are. Broker headers (x-death, x-first-death-*,
// x-delivery-count, ...) are never rejected: they go to facts, and the
// delivery count is used for the redelivery count. Other non-string values
// from foreign publishers are rendered as text rather than refused.
func decode(d *amqp.Delivery, exactReturns bool) decoded {
	out := decoded{headers: make(ports.Headers, len(d.Headers))}
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
	if !exactReturns && d.Redelivered {
		out.returns = 1
	}
	if d.Redelivered {
		out.fact("amqp.redelivered", "true")
	}
	if out.headers[ports.HeaderID] == "" && d.MessageId != "" {
		out.headers[ports.HeaderID] = d.MessageId
	}
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
