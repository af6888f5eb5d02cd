package mem

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Clock is the time source of a [Broker] (the module's scheduler clock):
// it stamps messages and drives the scheduler of delayed messages,
// delayed requeues and instance expiry. Tests pass a manual clock with
// [WithClock].
type Clock = schedule.Clock

// Timer is the handle returned by Clock.AfterFunc; *time.Timer satisfies
// it.
type Timer = schedule.ClockTimer

// BrokerOption configures a [Broker] made by [NewBroker].
type BrokerOption func(*brokerConfig) error

type brokerConfig struct {
	clock                     Clock
	historyMsgs, historyBytes int
}

// Defaults of [WithHistory].
const (
	DefaultHistoryMessages = 1024
	DefaultHistoryBytes    = 4 << 20
)

// WithHistory bounds what the broker keeps of each topic for new groups
// that start at the earliest message (SubscriptionSpec.Start
// StartEarliest): the last messages published to the topic, at most
// messages of them and bytes of payload, none past the topic's retention.
// Default [DefaultHistoryMessages] and [DefaultHistoryBytes]; both must be
// at least 1.
func WithHistory(messages, bytes int) BrokerOption {
	return func(cfg *brokerConfig) error {
		if messages < 1 || bytes < 1 {
			return valueError("WithHistory", fmt.Sprintf("messages %d and bytes %d must both be at least 1", messages, bytes))
		}
		cfg.historyMsgs, cfg.historyBytes = messages, bytes
		return nil
	}
}

// WithClock sets the broker's clock. Default: the system clock. A nil
// clock is an error.
func WithClock(c Clock) BrokerOption {
	return func(cfg *brokerConfig) error {
		if c == nil {
			return valueError("WithClock", "clock must not be nil")
		}
		cfg.clock = c
		return nil
	}
}

// Option configures an [Adapter] made by [New] or [Open].
type Option func(*adapterConfig) error

type adapterConfig struct {
	namespace string
	maxQueue  int
	existing  map[ports.Topic]Existing
}

// Existing maps a logical topic, and some of its LoadBalance groups, to
// names that already exist on the broker: see [WithExisting].
type Existing struct {
	// Topic is the logical topic the application uses.
	Topic ports.Topic
	// As is the existing broker topic it maps to.
	As ports.Topic
	// Groups maps logical group names to existing queue (group) names on
	// As. A group not listed keeps its name.
	Groups map[string]string
}

// WithExisting makes the adapter adopt existing names instead of deriving
// its own: Send to e.Topic publishes to e.As, Subscribe and DeclareGroup
// of a listed group use its existing queue, and deliveries carry the
// logical topic. An adopted queue is never created (Subscribe and
// DeclareGroup fail with ports.ErrInvalid when it does not exist), and
// DeclareTopic of an adopted topic only checks. The dead-letter topic is
// mapped only when listed itself. A Topic may be listed once.
func WithExisting(es ...Existing) Option {
	return func(cfg *adapterConfig) error {
		for _, e := range es {
			if err := e.Topic.Validate(); err != nil {
				return valueError("WithExisting", fmt.Sprintf("topic: %v", err))
			}
			if err := e.As.Validate(); err != nil {
				return valueError("WithExisting", fmt.Sprintf("existing name of %q: %v", e.Topic, err))
			}
			if _, dup := cfg.existing[e.Topic]; dup {
				return valueError("WithExisting", fmt.Sprintf("maps topic %q twice", e.Topic))
			}
			groups := make(map[string]string, len(e.Groups))
			for g, q := range e.Groups {
				if g == "" || q == "" {
					return valueError("WithExisting", fmt.Sprintf("topic %q maps group %q to %q: both must be non-empty", e.Topic, g, q))
				}
				groups[g] = q
			}
			e.Groups = groups
			if cfg.existing == nil {
				cfg.existing = map[ports.Topic]Existing{}
			}
			cfg.existing[e.Topic] = e
		}
		return nil
	}
}

// DefaultMaxQueue is the default bound on a queue's ready messages (see
// [WithMaxQueue]).
const DefaultMaxQueue = 10_000

// WithMaxQueue bounds each queue this adapter subscribes to at n ready
// messages (the latest Subscribe of a queue sets it). While a queue holds
// n, Send to its topic blocks until a consumer takes some or Send's ctx is
// done, and then fails that message with an error wrapping [ErrQueueFull]
// and ctx.Err(), storing nothing of it. The bound is soft by one message
// per concurrent Send and does not hold back requeues, returned
// deliveries, dead-letter copies or delayed messages falling due. 0 means
// unbounded; default [DefaultMaxQueue]; URL parameter max_queue.
func WithMaxQueue(n int) Option {
	return func(cfg *adapterConfig) error {
		if n < 0 {
			return valueError("WithMaxQueue", fmt.Sprintf("is %d; use a positive bound, or 0 for unbounded queues", n))
		}
		cfg.maxQueue = n
		return nil
	}
}

// WithNamespace isolates the adapter's topics, groups and queues from
// those of adapters on the same broker with another namespace. Default: ""
// (the shared default namespace). A namespace is at most 100 letters,
// digits, '.', '-' and '_'.
func WithNamespace(ns string) Option {
	return func(cfg *adapterConfig) error {
		if len(ns) > 100 {
			return valueError("WithNamespace", fmt.Sprintf("namespace %q is longer than 100 characters", ns))
		}
		if i := strings.IndexFunc(ns, func(r rune) bool { return !nameRune(r) }); i >= 0 {
			return valueError("WithNamespace", fmt.Sprintf("namespace %q has invalid character %q at %d (allowed: letters, digits, '.', '-', '_')", ns, ns[i], i))
		}
		cfg.namespace = ns
		return nil
	}
}

func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'
}

// ErrQueueFull is wrapped, together with ctx.Err(), by the error of a
// message that Send could not store because a queue of its topic stayed at
// its bound (see [WithMaxQueue]) until Send's ctx was done.
var ErrQueueFull = errors.New("mem: queue full")

func valueError(field, reason string) error {
	return &ports.ValueError{Field: field, Reason: reason}
}
