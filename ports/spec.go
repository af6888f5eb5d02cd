package ports

import (
	"fmt"
	"math/rand/v2"
	"path"
	"time"
)

// Mode says how the instances of a subscription share its messages.
type Mode int

const (
	// LoadBalance: competing consumers; each message is handled by one
	// instance of the group, platform-wide.
	LoadBalance Mode = iota
	// Broadcast: every running instance gets its own copy.
	Broadcast
)

func (m Mode) String() string {
	switch m {
	case LoadBalance:
		return "LOAD_BALANCE"
	case Broadcast:
		return "BROADCAST"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// SubscriptionSpec describes what a consumer wants. The zero value of every
// optional field is a sensible default, documented on the field.
type SubscriptionSpec struct {
	// Topic is the logical topic to consume. Required.
	Topic Topic
	// Mode is LoadBalance (default) or Broadcast.
	Mode Mode
	// Group names the consumer group. LoadBalance instances with the same
	// Group compete for messages; the group's backlog is kept while no
	// instance runs (where Capabilities.DurableGroups). Required for
	// LoadBalance; for Broadcast it prefixes the per-instance subscription.
	Group string
	// Instance identifies this process within a Broadcast subscription. An
	// instance restarted with the same Instance resumes its own copy (until
	// InstanceTTL expires it). Default: a random id per Subscribe.
	Instance string

	// Batch asks for batched delivery; the zero value means single delivery.
	Batch BatchSpec
	// InFlight bounds the deliveries handed out and not yet settled (the
	// prefetch). Default 64, or Batch.Size when that is larger. A value
	// set below Batch.Size is an error (every batch would be cut short and
	// wait out its window).
	InFlight int
	// KeyFilter, when set, keeps only messages whose partition key matches
	// this path.Match pattern (e.g. "device-*"). Messages that do not match
	// are not for this subscription and are acknowledged without handling
	// where the broker cannot filter natively.
	KeyFilter string
	// InstanceTTL removes an idle per-instance (Broadcast) subscription this
	// long after its last consumer left, where Capabilities.SubscriptionExpiry.
	// Zero means the adapter's default (removed when the instance stops).
	InstanceTTL time.Duration

	// DisableDeadLetter turns the dead-letter topic off. Poison and messages
	// that exhausted their retries are then requeued with Retry.MaxBackoff
	// and reported as errors; they are never dropped.
	DisableDeadLetter bool
	// Retry bounds requeues of failing (non-poison) deliveries.
	Retry RetryPolicy

	// QoS is the delivery class consumed: AtLeastOnce (default) or
	// BestEffort (see QoS; adapters without Capabilities.BestEffort fall
	// back to AtLeastOnce and say so). ExactlyOnce is refused by Validate
	// and by adapters; a flow pipeline accepts it when its sinks make the
	// effect exactly once (see QoS), and subscribes with AtLeastOnce.
	QoS QoS
	// Start is where a new group begins reading: StartLatest (default) or
	// StartEarliest (where Capabilities.StartEarliest; refused elsewhere).
	// A group that already exists resumes where it left off.
	Start StartPosition
	// SingleActive asks that one instance of the LoadBalance group at a
	// time receives the group's messages, the others standing by until it
	// stops or dies (RabbitMQ single-active consumer, Pulsar failover, a
	// one-member Kafka assignment). Where Capabilities.SingleActive is
	// false Subscribe refuses it with ErrUnsupported. It preserves the
	// broker's order through one consumer; with more than one worker the
	// pipeline still handles messages concurrently.
	SingleActive bool
}

// BatchSpec asks for batches of up to Size deliveries, each batch closed
// after Window even when not full.
type BatchSpec struct {
	// Size is the largest batch. 0 disables batching.
	Size int
	// Window bounds how long a partial batch waits for more deliveries.
	// Default 100ms when Size > 0.
	Window time.Duration
	// MaxBytes, when positive, closes a batch before its payloads exceed
	// this many bytes (a single larger delivery still forms its own batch).
	MaxBytes int
}

// RetryPolicy bounds and paces requeues.
type RetryPolicy struct {
	// MaxAttempts is the number of deliveries a message gets before a
	// failing one is dead-lettered (so MaxAttempts-1 requeues). Default 5.
	// A negative value means unbounded (never recommended).
	MaxAttempts int
	// Backoff is the delay before the first redelivery. Default 100ms.
	// Zero after defaults means "requeue immediately" only if NoBackoff.
	Backoff time.Duration
	// MaxBackoff caps the exponential backoff. Default 30s.
	MaxBackoff time.Duration
	// Multiplier grows the backoff per attempt: 1 keeps it constant.
	// Default (zero) 2; a value below 1 other than zero is an error.
	Multiplier float64
	// Jitter is the fraction (0..1) of random spread applied to each
	// backoff. Default (zero) 0.2; set NoJitter for none.
	Jitter float64
	// NoJitter turns the random spread off (Jitter must then be zero).
	NoJitter bool
	// NoBackoff requeues immediately (tests, or brokers that pace
	// redelivery themselves).
	NoBackoff bool
}

// SpecDefaulter is implemented by adapters that carry subscription
// defaults of their own, such as an adapter opened by adapters.Open with
// URL parameters (inflight, max_attempts, backoff, max_backoff). flow.New
// calls it through ApplySpecDefaults before the ports defaults.
type SpecDefaulter interface {
	// SpecDefaults returns s with the adapter's defaults filled into the
	// fields s leaves zero, field by field; a field s sets is kept.
	SpecDefaults(s SubscriptionSpec) SubscriptionSpec
}

// ApplySpecDefaults returns s with a's subscription defaults filled in
// when a (or an adapter it wraps) is a SpecDefaulter, and s unchanged
// otherwise.
func ApplySpecDefaults(a Adapter, s SubscriptionSpec) SubscriptionSpec {
	for a != nil {
		if d, ok := a.(SpecDefaulter); ok {
			return d.SpecDefaults(s)
		}
		w, ok := a.(interface{ Unwrap() Adapter })
		if !ok {
			break
		}
		a = w.Unwrap()
	}
	return s
}

// Defaults used when a field is left zero.
const (
	DefaultInFlight    = 64
	DefaultBatchWindow = 100 * time.Millisecond
	DefaultMaxAttempts = 5
	DefaultBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
	DefaultMultiplier  = 2.0
	DefaultJitter      = 0.2
)

// WithDefaults returns s with every zero optional field set to its default.
func (s SubscriptionSpec) WithDefaults() SubscriptionSpec {
	if s.InFlight <= 0 {
		s.InFlight = DefaultInFlight
	}
	if s.Batch.Size > 0 {
		if s.Batch.Window <= 0 {
			s.Batch.Window = DefaultBatchWindow
		}
		if s.InFlight < s.Batch.Size {
			s.InFlight = s.Batch.Size
		}
	}
	s.Retry = s.Retry.WithDefaults()
	return s
}

// WithDefaults returns p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.MaxBackoff < p.Backoff {
		p.MaxBackoff = p.Backoff
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.NoJitter {
		p.Jitter = 0
	} else if p.Jitter == 0 {
		p.Jitter = DefaultJitter
	}
	return p
}

// Validate reports the first problem with s, as an error wrapping
// ErrInvalid. Call it on the spec as written, before WithDefaults, which
// would replace some invalid values.
func (s SubscriptionSpec) Validate() error {
	if err := s.Topic.Validate(); err != nil {
		return err
	}
	switch s.Mode {
	case LoadBalance:
		if s.Group == "" {
			return &ValueError{Field: "SubscriptionSpec.Group", Reason: "is required for LOAD_BALANCE"}
		}
	case Broadcast:
	default:
		return &ValueError{Field: "SubscriptionSpec.Mode", Reason: fmt.Sprintf("unknown mode %d", int(s.Mode))}
	}
	if s.InFlight < 0 {
		return &ValueError{Field: "SubscriptionSpec.InFlight", Reason: "must not be negative"}
	}
	if s.Batch.Size < 0 || s.Batch.Window < 0 || s.Batch.MaxBytes < 0 {
		return &ValueError{Field: "SubscriptionSpec.Batch", Reason: "size, window and bytes must not be negative"}
	}
	if s.Batch.Size > 0 && s.InFlight > 0 && s.InFlight < s.Batch.Size {
		return &ValueError{Field: "SubscriptionSpec.InFlight", Reason: fmt.Sprintf("%d is below Batch.Size %d: every batch would be cut short; raise InFlight or leave it zero", s.InFlight, s.Batch.Size)}
	}
	if s.InstanceTTL < 0 {
		return &ValueError{Field: "SubscriptionSpec.InstanceTTL", Reason: "must not be negative"}
	}
	if err := s.QoS.validate("SubscriptionSpec.QoS"); err != nil {
		return err
	}
	if s.Start != StartLatest && s.Start != StartEarliest {
		return &ValueError{Field: "SubscriptionSpec.Start", Reason: fmt.Sprintf("unknown start position %d", int(s.Start))}
	}
	if s.SingleActive && s.Mode != LoadBalance {
		return &ValueError{Field: "SubscriptionSpec.SingleActive", Reason: "applies to a LOAD_BALANCE group only (a Broadcast instance is already the only consumer of its copy)"}
	}
	if s.KeyFilter != "" {
		if _, err := path.Match(s.KeyFilter, ""); err != nil {
			return &ValueError{Field: "SubscriptionSpec.KeyFilter", Reason: fmt.Sprintf("bad pattern %q: %v", s.KeyFilter, err)}
		}
	}
	return s.Retry.Validate()
}

// Validate reports the first problem with p, as an error wrapping
// ErrInvalid.
func (p RetryPolicy) Validate() error {
	field := func(f string) string { return "SubscriptionSpec.Retry." + f }
	switch {
	case p.Backoff < 0:
		return &ValueError{Field: field("Backoff"), Reason: fmt.Sprintf("%v is negative (zero means the default %v; NoBackoff requeues at once)", p.Backoff, DefaultBackoff)}
	case p.MaxBackoff < 0:
		return &ValueError{Field: field("MaxBackoff"), Reason: fmt.Sprintf("%v is negative (zero means the default %v)", p.MaxBackoff, DefaultMaxBackoff)}
	case p.Backoff > 0 && p.MaxBackoff > 0 && p.MaxBackoff < p.Backoff:
		return &ValueError{Field: field("MaxBackoff"), Reason: fmt.Sprintf("%v is shorter than Backoff %v", p.MaxBackoff, p.Backoff)}
	case p.Multiplier != 0 && p.Multiplier < 1:
		return &ValueError{Field: field("Multiplier"), Reason: fmt.Sprintf("%v is below 1 (1 keeps the backoff constant; zero means the default %v)", p.Multiplier, DefaultMultiplier)}
	case p.Jitter < 0 || p.Jitter > 1:
		return &ValueError{Field: field("Jitter"), Reason: fmt.Sprintf("%v is outside 0..1 (zero means the default %v; NoJitter turns it off)", p.Jitter, DefaultJitter)}
	case p.NoJitter && p.Jitter != 0:
		return &ValueError{Field: field("Jitter"), Reason: "set together with NoJitter"}
	}
	return nil
}

// MatchKey reports whether key passes s.KeyFilter (always true without one).
func (s SubscriptionSpec) MatchKey(key string) bool {
	if s.KeyFilter == "" {
		return true
	}
	ok, _ := path.Match(s.KeyFilter, key)
	return ok
}

// Delay returns the backoff before redelivery number attempt (1 for the
// first redelivery): Backoff·Multiplier^(attempt-1), capped at MaxBackoff,
// spread by ±Jitter. Call it on a policy with defaults applied; NoBackoff
// returns 0.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if p.NoBackoff || p.Backoff <= 0 {
		return 0
	}
	d := float64(p.Backoff)
	for i := 1; i < attempt && d < float64(p.MaxBackoff); i++ {
		d *= max(p.Multiplier, 1)
	}
	if p.MaxBackoff > 0 && d > float64(p.MaxBackoff) {
		d = float64(p.MaxBackoff)
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * (2*rand.Float64() - 1)
	}
	return time.Duration(d)
}
