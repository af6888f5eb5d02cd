package kit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Delayer holds work until its time, for brokers without native delay: a
// delayed message (ports.Message.Delay) to publish later, or a delayed
// requeue whose copy is published (and whose original is acked) when the
// delay is over. The timers live in an operators/schedule Scheduler (one
// heap entry each, no goroutine per item); due work runs on the Delayer's
// own goroutine, in due order, one at a time, so it may block on broker
// I/O without delaying the scheduler's other timers.
//
// Stop cancels what is pending without running it. Held work belongs to
// the adapter, not to the Delayer: an adapter holding a requeue keeps the
// original unacked until the copy is published, so a Stop (or a crash)
// before then makes the broker redeliver the original, never lose it. A
// held Send that the broker confirmed (the adapter's own store) is the
// adapter's to keep; one it never published must not have been confirmed
// to the sender.
type Delayer struct {
	sched *schedule.Scheduler
	own   bool

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pending map[*held]struct{}
	due     []*held
	wake    chan struct{}
	stopped bool
	done    chan struct{}
}

type held struct {
	fn func(ctx context.Context)
	t  *schedule.Timer
}

// DelayerOptions configure a Delayer.
type DelayerOptions struct {
	// Scheduler holds the timers. Default: a Scheduler of the Delayer's own
	// (with Clock), stopped by Stop. A shared Scheduler is not stopped.
	Scheduler *schedule.Scheduler
	// Clock drives the Delayer's own Scheduler (fake clocks in tests).
	// Ignored with Scheduler. Default: the system clock.
	Clock schedule.Clock
}

// NewDelayer returns a running Delayer; call Stop when done.
func NewDelayer(opts DelayerOptions) *Delayer {
	d := &Delayer{
		sched:   opts.Scheduler,
		pending: map[*held]struct{}{},
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if d.sched == nil {
		d.sched, d.own = schedule.New(schedule.Options{Clock: opts.Clock}), true
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	go d.loop()
	return d
}

// After runs fn on the Delayer's goroutine once delay has passed (<= 0: as
// soon as possible). fn receives a context cancelled by Stop; it should
// bound its broker I/O with it. After returns an error wrapping
// ports.ErrClosed after Stop.
func (d *Delayer) After(delay time.Duration, fn func(ctx context.Context)) error {
	h := &held{fn: fn}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return errDelayerStopped
	}
	t, err := d.sched.After(delay, func() { d.fire(h) })
	if err != nil {
		return fmt.Errorf("%w: %w", errDelayerStopped, err)
	}
	h.t = t
	d.pending[h] = struct{}{}
	return nil
}

var errDelayerStopped = fmt.Errorf("kit: delayer stopped: %w", ports.ErrClosed)

// fire runs on the scheduler's goroutine: hand h to the loop.
func (d *Delayer) fire(h *held) {
	d.mu.Lock()
	if _, ok := d.pending[h]; !ok || d.stopped {
		d.mu.Unlock()
		return
	}
	delete(d.pending, h)
	d.due = append(d.due, h)
	d.mu.Unlock()
	Signal(d.wake)
}

// Pending returns the number of items waiting for their time or to run.
func (d *Delayer) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending) + len(d.due)
}

func (d *Delayer) loop() {
	defer close(d.done)
	for {
		select {
		case <-d.wake:
		case <-d.ctx.Done():
			return
		}
		for {
			d.mu.Lock()
			if d.stopped || len(d.due) == 0 {
				d.due = d.due[:0:0]
				d.mu.Unlock()
				break
			}
			h := d.due[0]
			d.due[0] = nil
			d.due = d.due[1:]
			d.mu.Unlock()
			h.fn(d.ctx)
		}
	}
}

// Stop cancels every pending item without running it, cancels the context
// of the one running and waits for it to return. It returns how many items
// it cancelled. It is idempotent (later calls return 0).
func (d *Delayer) Stop() int {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return 0
	}
	d.stopped = true
	n := len(d.due)
	d.due = nil
	for h := range d.pending {
		h.t.Cancel() // a timer firing now finds the Delayer stopped
		n++
	}
	d.pending = nil
	d.mu.Unlock()
	d.cancel()
	<-d.done
	if d.own {
		d.sched.Stop()
	}
	return n
}
