package activemq

import (
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// A header travels as a STOMP header of its name (a JMS property), a name
// the broker or STOMP reserves with escapePrefix (removed on delivery).
const escapePrefix = "sluice-hdr-"

// scheduledDelay is ActiveMQ's delay property (ms; schedulerSupport).
const scheduledDelay = "AMQ_SCHEDULED_DELAY"

// reserved are the names STOMP or ActiveMQ give a meaning of their own.
var reserved = map[string]bool{
	"destination": true, "message-id": true, "subscription": true, "ack": true, "receipt": true,
	"transaction": true, "content-length": true, "expires": true, "priority": true, "persistent": true,
	"timestamp": true, "type": true, "correlation-id": true, "reply-to": true, "redelivered": true,
	"original-destination": true, "id": true, "selector": true, "transformation": true,
	"transformation-error": true, "scheduledjobid": true, "receipt-id": true, "message": true,
	"login": true, "passcode": true, "host": true, "heart-beat": true, "accept-version": true, "version": true,
}

func needsEscape(k string) bool {
	l := strings.ToLower(k)
	return reserved[l] || strings.HasPrefix(l, "jms") || strings.HasPrefix(l, "amq_") ||
		strings.HasPrefix(l, "activemq") || strings.HasPrefix(k, escapePrefix)
}

// sendOpts returns the content type and the frame options that carry m:
// its headers, persistent:true and the delay.
func sendOpts(m *ports.Message, extra ...func(*frame.Frame) error) (string, []func(*frame.Frame) error) {
	opts := make([]func(*frame.Frame) error, 0, len(m.Headers)+2+len(extra))
	opts = append(opts, stomp.SendOpt.Header("persistent", "true"))
	contentType := ""
	for _, h := range m.Headers {
		k, v := h.Name, h.Value
		switch {
		case k == ports.HeaderContentType:
			contentType = v
		case needsEscape(k):
			opts = append(opts, stomp.SendOpt.Header(escapePrefix+k, v))
		default:
			opts = append(opts, stomp.SendOpt.Header(k, v))
		}
	}
	if m.Delay > 0 {
		ms := (m.Delay + time.Millisecond - 1) / time.Millisecond
		opts = append(opts, stomp.SendOpt.Header(scheduledDelay, strconv.FormatInt(int64(ms), 10)))
	}
	return contentType, append(opts, extra...)
}

// brokerHeaders are the broker's on delivery: facts, not headers.
var brokerHeaders = map[string]bool{
	"destination": true, "message-id": true, "subscription": true, "ack": true, "content-length": true,
	"expires": true, "priority": true, "persistent": true, "timestamp": true, "redelivered": true,
	"original-destination": true, "scheduledJobId": true, scheduledDelay: true, "content-type": true,
	"transformation": true,
}

// decode makes the record of m, its facts in f: the JMS message id is the
// broker's identity; redelivered:true (handed back by a lost consumer)
// counts one.
func decode(m *stomp.Message, f *frameFacts) driver.Record {
	h := make(ports.Headers, 0, min(m.Header.Len(), 8)) // most are the broker's: a larger hint allocates more than the envelope needs
	for i := range m.Header.Len() {
		k, v := m.Header.GetAt(i)
		if brokerHeaders[k] {
			continue
		}
		if orig, ok := strings.CutPrefix(k, escapePrefix); ok {
			k = orig
		}
		if _, dup := h.Lookup(k); !dup { // STOMP: the first occurrence wins
			h.Set(k, v)
		}
	}
	if m.ContentType != "" {
		h.Set(ports.HeaderContentType, m.ContentType)
	}
	id := m.Header.Get("message-id")
	r := driver.Record{
		Message:  ports.Message{Key: h.Get(ports.HeaderPartitionKey), Payload: m.Body, Headers: h},
		BrokerID: id,
		Handle:   m,
	}
	*f = frameFacts{id: id, destination: m.Destination, redelivered: m.Header.Get("redelivered") == "true"}
	if f.redelivered {
		r.RedeliveryCount = 1
	}
	r.Facts = ports.NewFacts(f)
	return r
}

// frameFacts are a MESSAGE frame's facts (ports.FactSource).
type frameFacts struct {
	id, destination string
	redelivered     bool
}

func (f *frameFacts) Facts(yield func(key, value string) bool) {
	_ = yield("message-id", f.id) && yield("destination", f.destination) && (!f.redelivered || yield("redelivered", "true"))
}
