package portable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Options configure the portable layer. The zero value is ready to use.
type Options struct {
	// Logger receives the capability line at New (LogCapabilities) and
	// the fallbacks taken. Default: slog.Default().
	Logger *slog.Logger
	// Secrets are removed from the text of every error the adapter
	// returns or reports (passwords, tokens from the connection URL).
	Secrets []string
	// Clock drives the scheduler of delay fallbacks (fake clocks in
	// tests). Default: the system clock.
	Clock schedule.Clock
	// Backoff paces the retries of retryable receive failures. Default:
	// kit.DefaultBackoff.
	Backoff *kit.Backoff
}

// Adapter is a ports.Adapter over a driver.Driver.
type Adapter struct {
	d       driver.Driver
	caps    ports.Capabilities
	opts    Options
	log     *slog.Logger
	clock   schedule.Clock
	sched   *schedule.Scheduler // the one scheduler of every delay fallback
	backoff kit.Backoff
	decl    kit.Declared

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

var (
	_ ports.Adapter       = (*Adapter)(nil)
	_ ports.TopicDeclarer = (*Adapter)(nil)
	_ ports.GroupDeclarer = (*Adapter)(nil)
)

// New returns the adapter over d and logs its capabilities. Close it to
// close d.
func New(d driver.Driver, opts Options) *Adapter {
	a := &Adapter{d: d, caps: d.Capabilities(), opts: opts, log: cmp.Or(opts.Logger, slog.Default()), subs: map[*Subscription]struct{}{},
		backoff: *cmp.Or(opts.Backoff, &kit.DefaultBackoff), clock: cmp.Or(opts.Clock, schedule.Clock(schedule.SystemClock{}))}
	a.sched = schedule.New(schedule.Options{Clock: a.clock})
	LogCapabilities(a.log, ReadyMessage, d.Name(), a.caps)
	return a
}

// Name returns the driver's name.
func (a *Adapter) Name() string { return a.d.Name() }

// Capabilities returns what the driver declares.
func (a *Adapter) Capabilities() ports.Capabilities { return a.caps }

// Driver returns the driver, for adapter-specific extensions.
func (a *Adapter) Driver() driver.Driver { return a.d }

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Send validates, stamps and size-checks each message, then publishes the
// valid ones in one driver batch and waits for every confirm (see
// ports.Sender). A message with Delay on a broker without native delay is
// stored at once and held on the consuming side until it is due. Failures
// are joined *ports.SendError values, each classified with a portable
// code.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if err := ctx.Err(); err != nil {
		return failAll(msgs, err)
	}
	if a.isClosed() {
		return failAll(msgs, ports.ErrClosed)
	}
	var errs []error
	now := a.clock.Now()
	buf := batches.Get().(*[]ports.Message)
	batch := (*buf)[:0]
	var index []int // index[j] is the Send index of batch[j]; nil while they are equal
	for i := range msgs {
		m := msgs[i] // Stamp replaces the copy's headers, not the caller's
		err := m.Validate()
		if err == nil {
			err = m.CheckSize(a.caps.MaxMessageBytes, 0)
		}
		if err != nil {
			errs, index = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err}), indexOf(index, len(batch))
			continue
		}
		m.Stamp()
		if m.QoS == ports.BestEffort && !a.caps.BestEffort {
			m.QoS = ports.AtLeastOnce // documented fallback: travels at-least-once
		}
		if m.Delay > 0 && !a.caps.DelayedMessage {
			m.Headers = m.Headers.Clone() // Stamp kept the caller's when complete
			kit.SetNotBefore(&m.Headers, now.Add(m.Delay))
			m.Delay = 0
		}
		batch = append(batch, m)
		if index != nil {
			index = append(index, i)
		}
	}
	if len(batch) > 0 {
		for j, err := range a.d.SendBatch(ctx, batch) {
			if err != nil && j < len(batch) {
				i := j
				if index != nil {
					i = index[j]
				}
				errs = append(errs, &ports.SendError{Index: i, Topic: batch[j].Topic, Err: a.classify("send", err)})
			}
		}
	}
	clear(batch)
	*buf = batch[:0]
	batches.Put(buf)
	return errors.Join(errs...)
}

// batches recycles Send's message slices (the driver does not keep them).
var batches = sync.Pool{New: func() any { return new([]ports.Message) }}

// indexOf starts the batch-to-Send index at the first refused message: the
// n messages batched so far kept their Send index.
func indexOf(index []int, n int) []int {
	if index != nil {
		return index
	}
	index = make([]int, n, n+8)
	for j := range index {
		index[j] = j
	}
	return index
}

// failAll reports every message of a Send as unconfirmed with err.
func failAll(msgs []ports.Message, err error) error {
	if len(msgs) == 0 {
		return err
	}
	errs := make([]error, len(msgs))
	for i := range msgs {
		errs[i] = &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err}
	}
	return errors.Join(errs...)
}

// classify wraps a driver error with its portable code, scrubbed of
// secrets. Context errors and sluice's own errors are returned as they are.
func (a *Adapter) classify(op string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var be *ports.BrokerError
	if errors.As(err, &be) {
		return a.scrub(err)
	}
	c := a.d.Classify(err)
	if c.Code == nil && !c.Retryable {
		return a.scrub(err)
	}
	return a.scrub(&ports.BrokerError{Op: op, Code: c.Code, Retryable: c.Retryable, Err: err})
}

// Subscribe validates spec, refuses what the driver cannot honour, and
// opens the driver's subscription.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	s, err := a.subscribe(ctx, spec, a.d.Subscribe)
	if err != nil {
		return nil, err
	}
	if _, ok := s.ds.(driver.AckFlusher); ok {
		return flushing{s}, nil
	}
	return s, nil
}

// subscribe validates spec, refuses what the driver cannot honour, and
// opens the driver's subscription with open.
func (a *Adapter) subscribe(ctx context.Context, spec ports.SubscriptionSpec, open func(context.Context, ports.SubscriptionSpec) (driver.Subscription, error)) (*Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if err := a.refuse(spec); err != nil {
		return nil, err
	}
	drv := spec
	if spec.QoS == ports.BestEffort && !a.caps.BestEffort {
		a.log.Info("sluice: best-effort subscription consumes at-least-once (no native best-effort class)", "adapter", a.Name(), "topic", string(spec.Topic))
		drv.QoS, spec.QoS = ports.AtLeastOnce, ports.AtLeastOnce
	}
	if spec.Mode == ports.Broadcast && spec.Instance == "" {
		drv.Instance = ports.NewID()
		spec.Instance = drv.Instance
	}
	if a.isClosed() {
		return nil, ports.ErrClosed
	}
	// The driver subscribes without the adapter's lock: subscriptions of
	// one adapter start in parallel (a broker may take a second for each).
	ds, err := open(ctx, drv)
	if err != nil {
		return nil, a.classify("subscribe", err)
	}
	s := newSubscription(a, ds, spec)
	a.mu.Lock()
	if a.closed { // Close ran meanwhile and did not see this one
		a.mu.Unlock()
		_ = s.Stop(context.WithoutCancel(ctx))
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.mu.Unlock()
	return s, nil
}

// refuse returns ErrUnsupported for what spec asks and the driver does not
// declare.
func (a *Adapter) refuse(spec ports.SubscriptionSpec) error {
	switch {
	case spec.Mode == ports.Broadcast && !a.caps.Broadcast:
		return fmt.Errorf("%w: %s has no Broadcast mode", ports.ErrUnsupported, a.Name())
	case spec.Start == ports.StartEarliest && !a.caps.StartEarliest:
		return fmt.Errorf("%w: %s cannot start a new group at the earliest message", ports.ErrUnsupported, a.Name())
	case spec.SingleActive && !a.caps.SingleActive:
		return fmt.Errorf("%w: %s has no single-active groups", ports.ErrUnsupported, a.Name())
	}
	return nil
}

// DeclareTopic creates spec with the driver's TopicDeclarer, which keeps
// the properties and refuses a redeclaration with other ones; for a
// driver without one it records spec in this process (a redeclaration
// with other properties fails with a *ports.RedeclareError) and declares
// its groups with the driver's GroupDeclarer.
func (a *Adapter) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	if err := kit.Unsupported(a.Name(), a.caps, spec); err != nil {
		return err
	}
	if td, ok := a.d.(driver.TopicDeclarer); ok {
		if err := spec.Validate(); err != nil {
			return err
		}
		return a.classify("declare", td.DeclareTopic(ctx, spec))
	}
	return a.classify("declare", a.decl.Declare(ctx, spec, kit.DeclareGroups(a)))
}

// DeclareGroup validates topic and group and creates group's queue ahead
// of its first consumer where the driver can (ErrUnsupported otherwise).
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	gd, ok := a.d.(driver.GroupDeclarer)
	if !ok {
		return fmt.Errorf("%w: %s cannot declare a group ahead of its first consumer", ports.ErrUnsupported, a.Name())
	}
	if err := (ports.SubscriptionSpec{Topic: topic, Group: group}).Validate(); err != nil {
		return err
	}
	return a.classify("declare group", gd.DeclareGroup(ctx, topic, group))
}

// Close stops every subscription (returning their unsettled deliveries to
// the broker), then closes the driver. It is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*Subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Stop(ctx))
	}
	errs = append(errs, a.classify("close", a.d.Close(ctx)))
	a.sched.Stop()
	return errors.Join(errs...)
}

func (a *Adapter) forget(s *Subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}
