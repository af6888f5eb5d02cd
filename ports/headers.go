package ports

import "strconv"

// Envelope header names. They are identical on every broker; adapters map
// them onto the broker's header or property mechanism unchanged.
//
// Event attributes use the CloudEvents 1.0 HTTP binary-mode names; sluice's
// own extension attributes follow the CloudEvents extension naming rule
// (lower-case letters and digits). Transport facts that are not part of the
// event use the "sluice-" prefix.
const (
	HeaderSpecVersion   = "ce-specversion"   // always "1.0"
	HeaderID            = "ce-id"            // message id, unique per published message, stable across redeliveries
	HeaderType          = "ce-type"          // payload type, e.g. "com.example.order.paid.v1"
	HeaderSource        = "ce-source"        // producing service (optional)
	HeaderTime          = "ce-time"          // RFC 3339 publish time
	HeaderContentType   = "content-type"     // payload media type, "application/json" by convention
	HeaderRequestID     = "ce-requestid"     // request id, restored into the consumer's context
	HeaderTenantID      = "ce-tenantid"      // tenant id
	HeaderCorrelationID = "ce-correlationid" // one business journey
	HeaderCausationID   = "ce-causationid"   // id of the message that directly caused this one
	HeaderPartitionKey  = "ce-partitionkey"  // CloudEvents partitioning extension; mirrors Message.Key
	HeaderTraceParent   = "traceparent"      // W3C trace context
	HeaderTraceState    = "tracestate"       // W3C trace context

	HeaderRedeliveryCount  = "sluice-redelivery-count" // times this message was requeued (adapters that count themselves)
	HeaderDeadLetterReason = "sluice-dlq-reason"       // why a message was dead-lettered
	HeaderDeadLetterTopic  = "sluice-dlq-topic"        // the logical topic the message was dead-lettered from
	HeaderAttempts         = "sluice-attempts"         // delivery attempts made before dead-lettering
	HeaderDeadLetterTime   = "sluice-dlq-time"         // RFC 3339 time the dead-letter copy was made (where sluice makes it)
	HeaderIDSource         = "sluice-id-source"        // "broker" on a copy whose ce-id is the identity the broker gave the original (see IDSource)
)

// Headers are a message's envelope headers and user headers. Keys are
// case-sensitive; the Header* constants are lower case.
type Headers map[string]string

// Get returns the value of key, or "" (a nil Headers is empty).
func (h Headers) Get(key string) string { return h[key] }

// Clone returns a copy that does not share storage with h.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	c := make(Headers, len(h))
	for k, v := range h {
		c[k] = v
	}
	return c
}

// RedeliveryCountFrom parses the HeaderRedeliveryCount header. A missing
// header is 0; a malformed or negative one is an error wrapping ErrInvalid,
// so adapters can treat it as poison rather than guess.
func RedeliveryCountFrom(h Headers) (int, error) {
	s, ok := h[HeaderRedeliveryCount]
	if !ok || s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, &HeaderError{Header: HeaderRedeliveryCount, Value: s}
	}
	return n, nil
}
