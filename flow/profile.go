package flow

import (
	"fmt"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Profile is a named consumption preset (the design documents' LATENCY and
// THROUGHPUT profiles): it sets the prefetch (SubscriptionSpec.InFlight),
// the batch window, the settlement engine's linger, round size and
// concurrency, and the worker count of Sink stages, for a pipeline that
// wants each delivery handled and settled as soon as possible, or as many
// deliveries per second as possible.
//
// A profile fills only what the caller left unset: a field set in the
// SubscriptionSpec (or by the adapter's URL parameters), an explicit
// WithSettleLinger, WithSettleBatch or WithSettleConcurrency, and a
// stage's own Workers option all win over it, in any order of options.
// docs/profiles.md gives the figures each profile gives on the benchmark.
type Profile int

const (
	// ProfileDefault is no profile: the documented defaults of
	// ports.SubscriptionSpec and of each option.
	ProfileDefault Profile = iota
	// ProfileLatency keeps queues short and settles at once: InFlight 32,
	// a 5 ms batch window, no settle linger (every round goes as soon as
	// the engine looks at it), 8 concurrent Settle calls and 32 Sink
	// workers (so no delivery waits for a worker). It costs Settle calls:
	// rounds are small.
	ProfileLatency
	// ProfileThroughput fills rounds and batches: InFlight 512, a 250 ms
	// batch window, a 5 ms settle linger, rounds of up to 256 completions,
	// 8 concurrent Settle calls and 8 Sink workers. A delivery may wait up
	// to the linger for its settlement, and a partial batch up to the
	// window.
	ProfileThroughput
)

func (p Profile) String() string {
	switch p {
	case ProfileDefault:
		return "default"
	case ProfileLatency:
		return "latency"
	case ProfileThroughput:
		return "throughput"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// ProfileSettings are the values a Profile applies.
type ProfileSettings struct {
	InFlight          int           // SubscriptionSpec.InFlight
	BatchWindow       time.Duration // SubscriptionSpec.Batch.Window (used by batch operators)
	SettleLinger      time.Duration // WithSettleLinger
	SettleBatch       int           // WithSettleBatch (0: half of InFlight)
	SettleConcurrency int           // WithSettleConcurrency
	Workers           int           // Sink workers when the Sink sets no Workers
}

// Settings returns the values p applies; ProfileDefault returns the
// defaults (zero InFlight and BatchWindow mean the ports defaults).
func (p Profile) Settings() ProfileSettings {
	switch p {
	case ProfileLatency:
		return ProfileSettings{InFlight: 32, BatchWindow: 5 * time.Millisecond, SettleLinger: 0, SettleConcurrency: 8, Workers: 32}
	case ProfileThroughput:
		return ProfileSettings{InFlight: 512, BatchWindow: 250 * time.Millisecond, SettleLinger: 5 * time.Millisecond, SettleBatch: 256, SettleConcurrency: 8, Workers: 8}
	}
	return ProfileSettings{SettleLinger: DefaultSettleLinger, SettleConcurrency: DefaultSettleConcurrency, Workers: 1}
}

// WithProfile applies a consumption profile (see Profile). An unknown
// profile makes Start fail with ports.ErrInvalid.
func WithProfile(p Profile) Option {
	return optionFunc(func(c *config) { c.profile = p })
}

// applyProfile fills what the caller left unset in spec (already carrying
// the adapter's defaults, before the ports defaults) and in cfg from the
// configured profile. It returns an error for an unknown profile.
func applyProfile(cfg *config, spec ports.SubscriptionSpec) (ports.SubscriptionSpec, error) {
	if cfg.profile == ProfileDefault {
		return spec, nil
	}
	if cfg.profile != ProfileLatency && cfg.profile != ProfileThroughput {
		return spec, fmt.Errorf("flow: WithProfile(%v): unknown profile (use ProfileLatency or ProfileThroughput): %w", cfg.profile, ports.ErrInvalid)
	}
	s := cfg.profile.Settings()
	if spec.InFlight == 0 {
		spec.InFlight = s.InFlight
	}
	if spec.Batch.Window == 0 {
		spec.Batch.Window = s.BatchWindow
	}
	if !cfg.settle.lingerSet {
		cfg.settle.linger = s.SettleLinger
	}
	if !cfg.settle.batchSet && s.SettleBatch > 0 {
		cfg.settle.maxBatch = s.SettleBatch
	}
	if !cfg.settle.concurrencySet {
		cfg.settle.concurrency = s.SettleConcurrency
	}
	cfg.workers = s.Workers
	return spec, nil
}

// sinkOptions is stageOptions for a Sink: its worker count defaults to the
// profile's.
func (p *Pipeline) sinkOptions(opts []StageOption) stageConfig {
	return stageOptions(append([]StageOption{Workers(max(1, p.cfg.workers))}, opts...))
}
