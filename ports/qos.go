package ports

import (
	"errors"
	"fmt"
)

// QoS is a message's delivery class (the "q0/q1/q2" of a topic name in the
// design documents). The zero value is AtLeastOnce, the contract every
// other part of this package describes.
type QoS int

const (
	// AtLeastOnce (q1, the default): a confirmed publish is delivered until
	// a completion settles it; nothing is lost, duplicates are possible.
	AtLeastOnce QoS = iota
	// BestEffort (q0): for data that may be lost (metrics, ticks). The
	// adapter uses the broker's cheapest class where it has one (Pulsar
	// non-persistent topics, MQTT QoS 0, transient RabbitMQ messages); a
	// best-effort message may be dropped by the broker, a restart or a
	// full queue, and is never requeued or dead-lettered beyond what the
	// broker does on its own. Where the broker has no weaker class
	// (Capabilities.BestEffort false) the adapter falls back to
	// AtLeastOnce, which is stronger, and says so at Subscribe.
	BestEffort
	// ExactlyOnce (q2) is an effect, not a transport: no broker sluice
	// talks to can settle a delivery and the handler's side effect
	// atomically, so Subscribe, Send and Validate refuse it with
	// ErrExactlyOnce. A flow pipeline accepts it when its sinks make the
	// effect exactly once — inbox.Sink (operators/inbox) commits the
	// handler's writes and the delivery's identity in one database
	// transaction before the ack — and subscribes the adapter with
	// AtLeastOnce (see flow.ExactlyOnceEffect and docs/exactly-once.md).
	ExactlyOnce
)

// ErrExactlyOnce is returned for QoS ExactlyOnce where it cannot hold: by
// adapters (Subscribe, Send), by Validate, and by flow's Start for a
// pipeline whose sinks are not exactly-once. It wraps ErrUnsupported.
var ErrExactlyOnce = fmt.Errorf("%w: exactly-once delivery (q2) is not offered by a transport: end a flow pipeline with inbox.Sink (operators/inbox), which commits the effect and the delivery's identity in one SQL transaction, or use AtLeastOnce with an idempotent handler keyed by the message id (operators.Dedupe)", ErrUnsupported)

func (q QoS) String() string {
	switch q {
	case AtLeastOnce:
		return "at-least-once"
	case BestEffort:
		return "best-effort"
	case ExactlyOnce:
		return "exactly-once"
	}
	return fmt.Sprintf("QoS(%d)", int(q))
}

// validate reports an unknown or refused class for the named field.
func (q QoS) validate(field string) error {
	switch q {
	case AtLeastOnce, BestEffort:
		return nil
	case ExactlyOnce:
		return fmt.Errorf("%s: %w", field, ErrExactlyOnce)
	}
	return &ValueError{Field: field, Reason: fmt.Sprintf("unknown QoS %d", int(q))}
}

// StartPosition says where a new group (one with no committed position
// yet) starts reading a topic. An existing group always resumes where it
// left off.
type StartPosition int

const (
	// StartLatest (default): a new group receives what is published from
	// the moment it is created (its first Subscribe, or DeclareGroup).
	StartLatest StartPosition = iota
	// StartEarliest: a new group starts at the oldest message the broker
	// still retains for the topic, where Capabilities.StartEarliest;
	// elsewhere Subscribe refuses it with ErrUnsupported.
	StartEarliest
)

func (p StartPosition) String() string {
	switch p {
	case StartLatest:
		return "latest"
	case StartEarliest:
		return "earliest"
	}
	return fmt.Sprintf("StartPosition(%d)", int(p))
}

// SizeError reports a message larger than its broker accepts. It wraps
// ErrInvalid: retrying the same message cannot succeed.
type SizeError struct {
	Topic Topic
	// Size is what was counted: the payload alone, or the payload and the
	// encoded envelope when Envelope is true.
	Size int
	// Limit is the adapter's Capabilities.MaxMessageBytes.
	Limit int
	// Envelope says whether Size and Limit count the encoded headers too.
	Envelope bool
}

func (e *SizeError) Error() string {
	what := "payload"
	if e.Envelope {
		what = "payload with its envelope"
	}
	return fmt.Sprintf("message to %q is %d bytes (%s), above the broker's limit of %d bytes: split it or store it elsewhere and send a reference", string(e.Topic), e.Size, what, e.Limit)
}

// Is makes a SizeError match ErrInvalid and ErrTooLarge.
func (e *SizeError) Is(target error) bool { return target == ErrInvalid || target == ErrTooLarge }

// ErrTooLarge is matched by every *SizeError.
var ErrTooLarge = errors.New("message too large for the broker")

// CheckSize returns a *SizeError when m's payload is above limit bytes
// (limit <= 0 means no limit). Adapters call it in Send before touching
// the broker; envelope is the size of m's encoded headers when the
// broker's limit counts them (0 otherwise).
func (m *Message) CheckSize(limit, envelope int) error {
	if limit <= 0 {
		return nil
	}
	if n := len(m.Payload) + envelope; n > limit {
		return &SizeError{Topic: m.Topic, Size: n, Limit: limit, Envelope: envelope > 0}
	}
	return nil
}
