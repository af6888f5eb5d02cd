package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Pipeline is one subscription and the typed stages that handle its
// deliveries. Build it with New, attach stages to Source (Decode, Map,
// Filter, FlatMap, Operate, ...), end every branch with a terminal stage
// (Sink), then Run it.
//
// The pipeline owns every goroutine it starts; Stop (or the end of Run)
// waits for all of them.
type Pipeline struct {
	adapter ports.Adapter
	raw     ports.SubscriptionSpec // as the caller wrote it, for Validate
	spec    ports.SubscriptionSpec // with the adapter's and ports' defaults
	cfg     config

	// Built before Start.
	buildErr error
	open     int      // streams made and not yet consumed
	runs     []func() // stage goroutine bodies, started by Start
	inits    []func() // called by Start before any goroutine (atStart)
	source   chan Item[*ports.Delivery]
	srcFuse  fused[*ports.Delivery] // the source's consumer, when it runs inline
	srcTaken bool
	// predecode is the decoder of a Decode stage on the source, which
	// the subscription may run as it fetches (ports.Predecoder).
	predecode func(payload []byte) any
	inFlight  inFlightNeed // inflight.go
	sinks     []sinkInfo   // exactlyonce.go
	// exposed: a stage hands handlers deliveries, items or completions
	// (Via, Operate, Gather, a stage on the source other than Decode), so
	// the pipeline does not recycle (see recycle).
	exposed bool

	// Running state.
	mu      sync.Mutex
	started bool
	ended   bool // Run or Stop has run: the pipeline is single-use
	sub     ports.Subscription
	slots   *slots
	// recycler is sub when deliveries and roots are recycled: it reuses
	// deliveries, and no stage exposes them (exposed), and no observer
	// sees them. rootsBack holds the roots recycle gave back (under
	// rootsMu), rootsReuse those the receive loop took over.
	recycler ports.Recycler
	// headers is sub when it defers the deliveries' headers
	// (ports.HeaderDeferrer): a context loads them before it gives them,
	// and reads one through lookup when sub can (ports.HeaderLookup).
	headers    ports.HeaderDeferrer
	lookup     ports.HeaderLookup
	rootsMu    sync.Mutex
	rootsBack  []*root
	rootsReuse []*root
	eng        *engine
	workCtx    context.Context // items' parent context; cancelled by Stop
	work       context.CancelFunc
	recv       context.CancelFunc // stops the source
	settleC    context.Context
	settleX    context.CancelFunc
	closed     atomic.Bool // no settlement any more
	wg         sync.WaitGroup
	stopOnce   sync.Once
	stopErr    error
	failOnce   sync.Once
	failed     chan struct{}
	fatal      error
	done       chan struct{}
	report     func(error)

	stats counters
}

// New returns a pipeline that will consume spec from adapter. Nothing
// happens until Start or Run. Start validates spec as given (so a negative
// or out-of-range value is an error, not replaced by a default); the
// subscription defaults of the adapter (the URL parameters of an adapter
// from adapters.Open, see ports.SpecDefaulter) fill the fields left zero,
// field by field, then a profile's (WithProfile), then the ports defaults
// fill the rest (see ports.SubscriptionSpec). A nil adapter makes Start
// fail.
func New(adapter ports.Adapter, spec ports.SubscriptionSpec, opts ...Option) *Pipeline {
	p := &Pipeline{
		adapter: adapter,
		raw:     spec,
		cfg:     defaultConfig(),
		failed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	if adapter == nil {
		p.buildFail(fmt.Errorf("flow: New with a nil adapter (open one with mem.Open, adapters.Open or an adapter's Open): %w", ports.ErrInvalid))
	}
	for _, o := range opts {
		o.apply(&p.cfg)
	}
	// The caller's fields, then the adapter's defaults, then a profile's
	// (WithProfile), then the ports defaults.
	withProfile, err := applyProfile(&p.cfg, ports.ApplySpecDefaults(adapter, spec))
	if err != nil {
		p.buildFail(err)
	}
	p.spec = withProfile.WithDefaults()
	p.inFlight.set = withProfile.InFlight > 0
	p.stats.acked.n, p.stats.requeued.n, p.stats.deadLettered.n = &p.stats.settled, &p.stats.settled, &p.stats.settled
	p.report = p.reportErr
	p.source = make(chan Item[*ports.Delivery], min(p.spec.InFlight, 256))
	p.open = 1
	return p
}

// Spec returns the subscription spec with defaults applied (the adapter's,
// then the ports defaults), and with the in-flight limit a stage raised
// (see NeedInFlight).
func (p *Pipeline) Spec() ports.SubscriptionSpec { return p.spec }

// Source returns the stream of deliveries. It may be taken once.
func (p *Pipeline) Source() Stream[*ports.Delivery] {
	if p.srcTaken {
		p.buildFail(errors.New("flow: Source taken twice; a stream has one consumer (use FlatMap or Operate to fan out)"))
		return Stream[*ports.Delivery]{p: p, ch: make(chan Item[*ports.Delivery])}
	}
	p.srcTaken = true
	return Stream[*ports.Delivery]{p: p, ch: p.source, fz: &p.srcFuse}
}

func (p *Pipeline) buildFail(err error) {
	if p.buildErr == nil {
		p.buildErr = err
	}
}

// Start validates the pipeline, subscribes and starts the stages. It
// returns once the subscription is established on the broker, so a message
// sent afterwards reaches it. ctx bounds the subscribe call only.
//
// A spec with QoS ports.ExactlyOnce is accepted only when every Sink
// declared an exactly-once effect (ExactlyOnceEffect, set by inbox.Sink)
// and no FlatMap precedes one; otherwise Start returns an error wrapping
// ports.ErrExactlyOnce that names the sink. The adapter is then
// subscribed with AtLeastOnce: the transport stays at least once, and the
// sinks make the effect exactly once.
func (p *Pipeline) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return ErrSingleUse
	}
	if p.started {
		return errors.New("flow: pipeline already started; Start and Run are called once per pipeline")
	}
	if p.buildErr != nil {
		return p.buildErr
	}
	if p.open != 0 {
		return fmt.Errorf("flow: %d stream(s) have no consumer; end every branch with Sink", p.open)
	}
	// QoS ExactlyOnce: checked against the sinks, then subscribed at
	// least once (exactlyonce.go).
	raw, spec, err := p.exactlyOnceSpecs()
	if err != nil {
		return err
	}
	// The caller's values first: a default must not hide a mistake.
	if err := raw.Validate(); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("flow: spec with the adapter's defaults: %w", err)
	}
	sub, err := p.subscribe(ctx, spec) // transact.go
	if err != nil {
		if errors.Is(err, ports.ErrExactlyOnce) {
			return err
		}
		return fmt.Errorf("flow: subscribe %s on %s: %w", p.spec.Topic, p.adapter.Name(), err)
	}
	p.started = true
	p.sub = sub
	p.logInFlightRaise()
	p.slots = newSlots(p.spec.InFlight)
	if r, ok := sub.(ports.Recycler); ok && !p.exposed && p.cfg.observer == nil {
		p.recycler = r
		// Nothing outside the pipeline reads a delivery's headers unless
		// its context gives them (see deliveryCtx): they may stay in the
		// broker's record until then.
		if hd, ok := sub.(ports.HeaderDeferrer); ok {
			hd.DeferHeaders()
			p.headers = hd
			p.lookup, _ = hd.(ports.HeaderLookup)
		}
	}
	p.eng = newEngine(p, sub)
	go p.eng.run()
	p.workCtx, p.work = context.WithCancel(context.Background())
	for _, f := range p.inits {
		f()
	}
	p.settleC, p.settleX = context.WithCancel(context.Background())
	recvCtx, recv := context.WithCancel(context.Background())
	p.recv = recv

	p.wg.Add(2 + len(p.runs))
	go func() { defer p.wg.Done(); p.receiveLoop(recvCtx) }()
	go func() { defer p.wg.Done(); p.drainErrors(sub.Errors()) }()
	for _, run := range p.runs {
		go func() { defer p.wg.Done(); run() }()
	}
	return nil
}

// Run starts the pipeline and blocks until ctx is done or a fatal error
// occurs, then stops it: it waits up to the drain timeout for in-flight
// deliveries, cancels the rest (they are not settled) and returns. It
// returns nil after a stop caused by ctx, the fatal error otherwise.
func (p *Pipeline) Run(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-p.failed:
	}
	err := p.Stop(context.WithoutCancel(ctx))
	if p.fatal != nil {
		return p.fatal
	}
	var ae *AbandonedError
	if errors.As(err, &ae) {
		// A shutdown with work in flight is normal; the broker
		// redelivers what was abandoned. Say so, and return nil.
		p.cfg.logger.Warn("sluice: "+ae.Error(), "topic", string(p.spec.Topic), "adapter", p.adapter.Name())
		return nil
	}
	return err
}

// ErrSingleUse is returned by Start and Run on a pipeline that has already
// run: a pipeline is single-use; build a new one with New.
var ErrSingleUse = errors.New("flow: pipeline already ran and stopped; a pipeline is single-use: build a new one with New")

// AbandonedError is Stop's result when deliveries were still in flight at
// the end of the drain: their work was cancelled and none of them was
// settled, so the broker redelivers every one.
type AbandonedError struct {
	InFlight  int // abandoned: Cancelled + Late + Open
	Cancelled int // completed as cancelled
	Late      int // completed after stop (not settled)
	Open      int // still not completed when Stop returned (held by user code)
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("flow: stop abandoned %d in-flight deliveries (%d cancelled, %d completed after stop, %d not completed); none was settled, the broker redelivers them", e.InFlight, e.Cancelled, e.Late, e.Open)
}

// Unwrap returns context.Canceled: the abandoned work was cancelled.
func (e *AbandonedError) Unwrap() error { return context.Canceled }

// Stop stops receiving, waits for in-flight deliveries to complete for up
// to the drain timeout (WithDrainTimeout, default 5s) or until ctx is done,
// whichever comes first, then cancels the ones still in flight: their
// items' contexts are cancelled and nothing completed after that point is
// settled — the broker redelivers them. Stop never acks on its own, and it
// returns with any ctx, context.Background() included, once every
// pipeline goroutine has returned (handlers must return when their
// context is cancelled). When deliveries were abandoned that way the
// result is an *AbandonedError that counts them. Stop is idempotent;
// later calls return the first result. A stopped pipeline is single-use.
func (p *Pipeline) Stop(ctx context.Context) error {
	p.mu.Lock()
	started := p.started
	p.ended = true
	p.mu.Unlock()
	if !started {
		return nil
	}
	p.stopOnce.Do(func() {
		p.recv()
		dctx, cancel := context.WithTimeout(ctx, p.cfg.drainTimeout)
		// Past the drain, what is still in flight is cancelled below.
		_ = p.slots.waitIdle(dctx)
		cancel()
		p.closed.Store(true)
		cancelled0, late0 := p.stats.cancelled.Load(), p.stats.unsettled.Load()
		p.work()
		// Settle what completed before the stop, complete the adapter's
		// deferred settlements, then hand the rest back.
		fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		if err := p.eng.close(fctx); err != nil {
			p.report(fmt.Errorf("flow: stop: settlements still running after %v: %w", flushTimeout, err))
		}
		if f, ok := p.sub.(ports.Flusher); ok {
			if err := f.Flush(fctx); err != nil {
				p.report(fmt.Errorf("flow: stop: flush %s: %w (those deliveries will be redelivered)", p.adapter.Name(), err))
			}
		}
		cancel()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.sub.Stop(sctx)
		cancel()
		p.settleX()
		p.wg.Wait()
		// Abandoned: every delivery the stop cancelled or refused, and any
		// still never completed now that every goroutine has returned.
		ab := AbandonedError{
			Cancelled: int(p.stats.cancelled.Load() - cancelled0),
			Late:      int(p.stats.unsettled.Load() - late0),
			Open:      int(p.stats.inFlight.Load()),
		}
		ab.InFlight = ab.Cancelled + ab.Late + ab.Open
		switch {
		case err != nil:
			p.stopErr = fmt.Errorf("flow: stop subscription: %w", err)
		case ab.InFlight > 0:
			p.stopErr = &ab
		}
		close(p.done)
	})
	return p.stopErr
}

// flushTimeout bounds how long Stop waits for running settlements and the
// adapter's Flush.
const flushTimeout = 10 * time.Second

// Done is closed when the pipeline has stopped.
func (p *Pipeline) Done() <-chan struct{} { return p.done }

// Err returns the fatal error that stopped the pipeline, if any.
func (p *Pipeline) Err() error {
	select {
	case <-p.failed:
		return p.fatal
	default:
		return nil
	}
}

// fail records a fatal error and makes Run stop the pipeline.
func (p *Pipeline) fail(err error) {
	p.failOnce.Do(func() {
		p.fatal = err
		close(p.failed)
	})
}

func (p *Pipeline) reportErr(err error) {
	if errors.Is(err, ports.ErrConflict) {
		p.stats.conflicts.Add(1)
	}
	p.stats.errors.Add(1)
	if p.cfg.onError != nil {
		p.cfg.onError(err)
		return
	}
	p.cfg.logger.Warn("sluice: "+err.Error(), "topic", string(p.spec.Topic), "adapter", p.adapterName())
}

func (p *Pipeline) adapterName() string {
	if p.adapter == nil {
		return "(nil adapter)"
	}
	return p.adapter.Name()
}

func (p *Pipeline) drainErrors(errs <-chan error) {
	for err := range errs {
		p.report(fmt.Errorf("adapter %s: %w", p.adapter.Name(), err))
	}
}

func (p *Pipeline) observe(e Event) {
	if p.cfg.observer != nil {
		p.cfg.observer(e)
	}
}
