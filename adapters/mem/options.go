package mem

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Clock is the time source of a [Broker]: it stamps messages and drives the
// scheduler that holds delayed messages, delayed requeues and instance
// expiry. Tests pass a manual clock with [WithClock] to make time-based
// behaviour deterministic.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, like
	// time.AfterFunc. The broker arms at most one such timer at a time.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the handle returned by Clock.AfterFunc; *time.Timer satisfies
// it.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset re-arms the timer to fire after d.
	Reset(d time.Duration) bool
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// BrokerOption configures a [Broker] made by [NewBroker].
type BrokerOption interface {
	applyBroker(*brokerConfig) error
}

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
// messages of them and at most bytes of payload, and none older than
// the topic's declared retention. A message is kept in the history
// whether or not every group consumed it; the history is dropped with the
// topic's last queue. Default [DefaultHistoryMessages] and
// [DefaultHistoryBytes]. Both must be at least 1 (a message larger than
// bytes is not kept).
func WithHistory(messages, bytes int) BrokerOption {
	return brokerOptionFunc(func(cfg *brokerConfig) error {
		if messages < 1 || bytes < 1 {
			return valueError("WithHistory", fmt.Sprintf("messages %d and bytes %d must both be at least 1", messages, bytes))
		}
		cfg.historyMsgs, cfg.historyBytes = messages, bytes
		return nil
	})
}

type brokerOptionFunc func(*brokerConfig) error

func (f brokerOptionFunc) applyBroker(c *brokerConfig) error { return f(c) }

// WithClock sets the broker's clock. Default: the system clock. A nil
// clock is an error.
func WithClock(c Clock) BrokerOption {
	return brokerOptionFunc(func(cfg *brokerConfig) error {
		if c == nil {
			return valueError("WithClock", "clock must not be nil")
		}
		cfg.clock = c
		return nil
	})
}

// Option configures an [Adapter] made by [New] or [Open].
type Option interface {
	applyAdapter(*adapterConfig) error
}

type adapterConfig struct {
	namespace string
	maxQueue  int
	existing  map[ports.Topic]Existing
}

// Existing maps a logical topic, and some of its LoadBalance groups, to
// names that already exist on the broker (made by a program that does not
// use these names, or by another adapter): see [WithExisting].
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
// for a listed group use its existing queue, and deliveries carry the
// logical topic. An adopted queue is never created: Subscribe and
// DeclareGroup fail with an error wrapping ports.ErrInvalid when it does
// not exist; DeclareTopic of an adopted topic only checks (see
// [Adapter.DeclareTopic]). The dead-letter topic of e.Topic is mapped only
// when listed itself. Each e.Topic and e.As must be valid topics, and a
// Topic may be listed once.
func WithExisting(es ...Existing) Option {
	return optionFunc(func(cfg *adapterConfig) error {
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
	})
}

// DefaultMaxQueue is the default bound on a queue's ready messages (see
// [WithMaxQueue]).
const DefaultMaxQueue = 10_000

// WithMaxQueue bounds each queue this adapter subscribes to at n ready
// messages (received and not yet settled ones are bounded by InFlight
// instead). While a queue holds n or more, Send to its topic blocks until
// a consumer takes some or Send's ctx is done; then that message fails
// with an error wrapping [ErrQueueFull] and ctx.Err() (nothing of it is
// stored). So memory stays bounded when producers outrun consumers.
//
// The bound belongs to the queue and is set by each Subscribe (the latest
// wins, as the queue's KeyFilter). It is soft by at most one message per
// concurrent Send, and not applied to what re-enters a queue (requeues,
// deliveries returned by Stop), to dead-letter copies and to delayed
// messages when they fall due: holding those back would stall
// settlement or the scheduler.
//
// n == 0 means unbounded (the behaviour before the bound existed: a
// producer that is not paced grows the heap without limit). Default
// [DefaultMaxQueue]. A negative n is an error. The URL parameter is
// max_queue (mem://?max_queue=50000).
func WithMaxQueue(n int) Option {
	return optionFunc(func(cfg *adapterConfig) error {
		if n < 0 {
			return valueError("WithMaxQueue", fmt.Sprintf("is %d; use a positive bound, or 0 for unbounded queues", n))
		}
		cfg.maxQueue = n
		return nil
	})
}

type optionFunc func(*adapterConfig) error

func (f optionFunc) applyAdapter(c *adapterConfig) error { return f(c) }

// maxNamespace bounds a namespace's length.
const maxNamespace = 100

// WithNamespace isolates the adapter's topics, groups and queues from
// those of adapters on the same broker with another namespace: two
// adapters exchange messages only when their namespaces are equal (as two
// services on one RabbitMQ vhost with a name prefix). Default: "" (the
// shared default namespace). A namespace is at most 100 letters, digits,
// '.', '-' and '_'.
func WithNamespace(ns string) Option {
	return optionFunc(func(cfg *adapterConfig) error {
		if len(ns) > maxNamespace {
			return valueError("WithNamespace", fmt.Sprintf("namespace %q is longer than %d characters", ns, maxNamespace))
		}
		if i := strings.IndexFunc(ns, func(r rune) bool { return !nameRune(r) }); i >= 0 {
			return valueError("WithNamespace", fmt.Sprintf("namespace %q has invalid character %q at %d (allowed: letters, digits, '.', '-', '_')", ns, ns[i], i))
		}
		cfg.namespace = ns
		return nil
	})
}

func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'
}
