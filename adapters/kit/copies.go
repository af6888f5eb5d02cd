package kit

import (
	"strconv"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore carries the earliest delivery time of a requeued copy
// or a delayed message, in Unix milliseconds, for adapters that hold such
// messages on the consumer side (or double-check a broker's approximate
// delay). It is a transport header: an adapter removes it (TakeNotBefore)
// before it hands a delivery to the core.
const HeaderNotBefore = "sluice-not-before"

// RequeueCopy returns the message to republish for a requeue of d: the
// same topic, key, payload and headers (so the same HeaderID; d.ID when
// the headers have none), with
// HeaderRedeliveryCount set to d.RedeliveryCount+1. With delay > 0 the
// copy's Delay is delay and HeaderNotBefore is now+delay; with delay <= 0
// a stale HeaderNotBefore is removed. The copy shares no header storage
// with d.
func RequeueCopy(d *ports.Delivery, delay time.Duration) ports.Message {
	h := copyHeaders(d, 2)
	h.Set(ports.HeaderRedeliveryCount, strconv.Itoa(d.RedeliveryCount+1))
	h.Del(HeaderNotBefore)
	m := ports.Message{Topic: d.Topic, Key: d.Key, Payload: d.Payload, Headers: h}
	if delay > 0 {
		m.Delay = delay
		SetNotBefore(&m.Headers, time.Now().Add(delay))
	}
	return m
}

// NoReason is HeaderDeadLetterReason when a dead-letter disposition has no
// Reason.
const NoReason = "no reason given"

// DeadLetterCopy returns the message to publish to the dead-letter topic
// for d: topic ports.DeadLetterTopic(d.Topic), the same key, payload and
// headers (so the same HeaderID; d.ID when the headers have none), plus HeaderDeadLetterReason
// (disp.ReasonText, or NoReason), HeaderDeadLetterTopic (d.Topic),
// HeaderAttempts (disp.Attempts, or d.RedeliveryCount+1 when not set) and
// HeaderDeadLetterTime (at).
// HeaderRedeliveryCount and HeaderNotBefore are removed: the count starts
// again on the dead-letter topic. The copy shares no header storage with
// d.
func DeadLetterCopy(d *ports.Delivery, disp ports.Disposition, at time.Time) ports.Message {
	h := copyHeaders(d, 3)
	h.Del(ports.HeaderRedeliveryCount)
	h.Del(HeaderNotBefore)
	reason := disp.ReasonText()
	if reason == "" {
		reason = NoReason
	}
	attempts := disp.Attempts
	if attempts <= 0 {
		attempts = d.RedeliveryCount + 1
	}
	h.Set(ports.HeaderDeadLetterReason, reason)
	h.Set(ports.HeaderDeadLetterTopic, string(d.Topic))
	h.Set(ports.HeaderAttempts, strconv.Itoa(attempts))
	h.Set(ports.HeaderDeadLetterTime, at.UTC().Format(time.RFC3339Nano))
	return ports.Message{Topic: ports.DeadLetterTopic(d.Topic), Key: d.Key, Payload: d.Payload, Headers: h}
}

// SetNotBefore sets HeaderNotBefore to at, rounded up to the millisecond
// (never early). An adapter for a broker without native delay publishes a
// delayed message at once with this header and holds it on the consuming
// side until then (TakeNotBefore, then a Delayer), so the message is on the
// broker, not in the sender's memory, while it waits.
func SetNotBefore(h *ports.Headers, at time.Time) { h.Set(HeaderNotBefore, NotBefore(at)) }

// NotBefore is HeaderNotBefore's value for at: Unix milliseconds, rounded
// up (never early).
func NotBefore(at time.Time) string {
	ms := at.UnixMilli()
	if at.After(time.UnixMilli(ms)) {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// TakeNotBefore removes HeaderNotBefore from h and returns its time (the
// zero time when absent). It reads Unix milliseconds (SetNotBefore's form)
// and RFC 3339 (the Kafka adapter's). A malformed value is removed too and returned as
// a *ports.HeaderError (poison: set it as Delivery.Err).
func TakeNotBefore(h *ports.Headers) (time.Time, error) {
	s, ok := h.Lookup(HeaderNotBefore)
	if !ok {
		return time.Time{}, nil
	}
	h.Del(HeaderNotBefore)
	ms, err := strconv.ParseInt(s, 10, 64)
	if err == nil && ms >= 0 {
		return time.UnixMilli(ms), nil
	}
	// The Kafka adapter writes its own records' header in RFC 3339 (its
	// wire form since before the kit); accept it, so the one header name
	// has one meaning wherever a copy ends up.
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, &ports.HeaderError{Header: HeaderNotBefore, Value: s}
}

// copyHeaders clones d's headers with room for extra more, and fills
// HeaderID from d.ID when the headers lack it (a message published without
// sluice's envelope), so the copy keeps the delivery's idempotency key;
// an identity the broker assigned is marked with HeaderIDSource "broker",
// so the copy's delivery reports the same IDSource. A delivery without
// identity makes a copy without one.
func copyHeaders(d *ports.Delivery, extra int) ports.Headers {
	c := append(make(ports.Headers, 0, len(d.Headers)+extra+2), d.Headers...)
	if c.Get(ports.HeaderID) == "" && d.ID != "" {
		c.Set(ports.HeaderID, d.ID)
		if d.IDSource == ports.IDBroker {
			c.Set(ports.HeaderIDSource, "broker")
		}
	}
	return c
}
