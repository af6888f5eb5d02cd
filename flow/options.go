package flow

import (
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Option configures a Pipeline.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	logger       *slog.Logger
	onError      func(error)
	observer     func(Event)
	drainTimeout time.Duration
	settleTime   time.Duration
	settle       settleConfig
	profile      Profile // profile.go
	workers      int     // Sink workers without a Workers option (0: 1)
}

// settleConfig tunes the settlement engine.
type settleConfig struct {
	linger      time.Duration
	maxBatch    int // 0: half the in-flight limit
	concurrency int
	// Set by the options, so that a profile does not override them.
	lingerSet, batchSet, concurrencySet bool
}

// Defaults of the settlement engine.
const (
	// DefaultSettleLinger is how long a completion waits at most for
	// others to share its Settle call while deliveries are still being
	// handled.
	DefaultSettleLinger = time.Millisecond
	// DefaultSettleConcurrency is how many Settle calls a pipeline runs
	// at once.
	DefaultSettleConcurrency = 4
)

func defaultConfig() config {
	return config{
		logger:       slog.Default(),
		drainTimeout: 5 * time.Second,
		settle:       settleConfig{linger: DefaultSettleLinger, concurrency: DefaultSettleConcurrency},
	}
}

// WithLogger sets the logger for warnings (settlement failures, conflicts,
// adapter errors) when no error handler is set. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithErrorHandler receives every non-fatal error: failed settlements,
// conflicting completions, completions after stop and the adapter's
// asynchronous errors. It is called from pipeline goroutines and must not
// block. Default: log at Warn level with the logger.
func WithErrorHandler(f func(error)) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithObserver receives an Event for every delivery received and every
// settlement (or deliberate non-settlement). It is called synchronously on
// the hot path and must be fast. Several WithObserver options are all
// called, in the order given. Default: none.
func WithObserver(f func(Event)) Option {
	return optionFunc(func(c *config) {
		switch prev := c.observer; {
		case f == nil:
		case prev == nil:
			c.observer = f
		default:
			c.observer = func(e Event) { prev(e); f(e) }
		}
	})
}

// WithDrainTimeout bounds how long Stop (and Run, once its context is
// done) waits for in-flight deliveries to complete before it cancels them
// (cancelled deliveries are not settled and will be redelivered), whatever
// context Stop is given. Default 5s; zero cancels at once.
func WithDrainTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d >= 0 {
			c.drainTimeout = d
		}
	})
}

// WithSettleTimeout bounds each call to the adapter's Settle: a call that
// has not returned after d has its context cancelled, and the delivery is
// reported as a *SettleError and left unsettled (the broker redelivers it).
// Default 0: no bound beyond the adapter's own I/O timeouts, and no timer
// per settlement on the hot path.
func WithSettleTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.settleTime = d
		}
	})
}

// WithSettleLinger bounds how long a completion waits for others to share
// its Settle call (and so the delay settlement adds to a delivery): a round
// is settled when it is full (WithSettleBatch), when no delivery is being
// handled any more, or when its oldest completion has waited d. Zero
// settles every round at once, with whatever completed meanwhile. Default
// DefaultSettleLinger (1 ms). Negative values are ignored.
func WithSettleLinger(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d >= 0 {
			c.settle.linger, c.settle.lingerSet = d, true
		}
	})
}

// WithSettleBatch sets how many completions fill a round, which is then
// settled without waiting out the linger. Default: half the in-flight limit
// (at least 1). Values below 1 keep the default.
func WithSettleBatch(n int) Option {
	return optionFunc(func(c *config) {
		if n >= 1 {
			c.settle.maxBatch, c.settle.batchSet = n, true
		}
	})
}

// WithSettleConcurrency sets how many Settle calls the pipeline runs at
// once. While all are busy, completions keep coalescing into the next
// round, so a slow settlement (a confirmed dead-letter publish) never holds
// up the handlers — only, past the in-flight limit, the receiving of more.
// Default DefaultSettleConcurrency (4). Values below 1 keep the default.
func WithSettleConcurrency(n int) Option {
	return optionFunc(func(c *config) {
		if n >= 1 {
			c.settle.concurrency, c.settle.concurrencySet = n, true
		}
	})
}

// Event describes one step in a delivery's life, for observers.
type Event struct {
	// Delivery is the delivery concerned.
	Delivery *ports.Delivery
	// Received is true for the event emitted when the delivery arrives.
	Received bool
	// Outcome is the terminal completion (zero when Received).
	Outcome Outcome
	// Action is the settlement carried out (zero when none was: received,
	// cancelled, or failed).
	Action ports.Action
	// Err is a settlement failure, if any.
	Err error
}
