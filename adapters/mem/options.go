package mem

import (
	"fmt"
	"strings"
	"time"
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
	clock Clock
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
