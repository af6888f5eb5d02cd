package mem

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Clock is a [Broker]'s time source, the module scheduler's ([WithClock]).
type Clock = schedule.Clock

// Timer is the handle returned by Clock.AfterFunc.
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
// that start at the earliest message: the last messages published, at
// most messages of them and bytes of payload (both at least 1).
func WithHistory(messages, bytes int) BrokerOption {
	return func(cfg *brokerConfig) error {
		if messages < 1 || bytes < 1 {
			return valueError("WithHistory", fmt.Sprintf("messages %d and bytes %d must both be at least 1", messages, bytes))
		}
		cfg.historyMsgs, cfg.historyBytes = messages, bytes
		return nil
	}
}

// WithClock sets the broker's clock (tests). Default: the system clock.
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

// Existing maps a logical topic to an existing broker topic (As), and
// logical LoadBalance groups to existing queues on it (Groups; a group
// not listed keeps its name): see [WithExisting].
type Existing struct {
	Topic, As ports.Topic
	Groups    map[string]string
}

// WithExisting makes the adapter adopt existing names: Send to e.Topic
// publishes to e.As, a listed group consumes its existing queue, which is
// never created (ports.ErrInvalid when missing), and DeclareTopic of an
// adopted topic only checks. Deliveries carry the logical topic.
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
			for g, q := range e.Groups {
				if g == "" || q == "" {
					return valueError("WithExisting", fmt.Sprintf("topic %q maps group %q to %q: both must be non-empty", e.Topic, g, q))
				}
			}
			e.Groups = maps.Clone(e.Groups)
			if cfg.existing == nil {
				cfg.existing = map[ports.Topic]Existing{}
			}
			cfg.existing[e.Topic] = e
		}
		return nil
	}
}

// DefaultMaxQueue is the default of [WithMaxQueue].
const DefaultMaxQueue = 10_000

// WithMaxQueue bounds the ready messages of each queue this adapter
// subscribes to (the latest Subscribe sets it; 0: unbounded; URL
// parameter max_queue). Send to a full queue's topic waits for room, then
// fails with [ErrQueueFull] when its ctx is done. Requeues, returned
// deliveries, dead-letter copies and due delayed messages are not held.
func WithMaxQueue(n int) Option {
	return func(cfg *adapterConfig) error {
		if n < 0 {
			return valueError("WithMaxQueue", fmt.Sprintf("is %d; use a positive bound, or 0 for unbounded queues", n))
		}
		cfg.maxQueue = n
		return nil
	}
}

// WithNamespace isolates the adapter's topics and queues from other
// namespaces on the broker: at most 100 letters, digits, '.', '-', '_'.
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

// ErrQueueFull, joined with ctx.Err(), fails a message whose queue stayed
// at its bound ([WithMaxQueue]) until Send's ctx was done.
var ErrQueueFull = errors.New("mem: queue full")

func valueError(field, reason string) error {
	return &ports.ValueError{Field: field, Reason: reason}
}
