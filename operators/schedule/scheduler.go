// Package schedule is the local delay scheduler: one timer heap driven by
// one goroutine, for brokers without native delay. Adapters use it to hold
// delayed messages (ports.Message.Delay) and delayed requeues
// (ports.Disposition.Delay); the Delay stage of package operators uses the
// same heap inside a pipeline.
//
// A Scheduler keeps any number of pending timers for the cost of one heap
// entry each (no goroutine, no runtime timer per entry): 100k pending timers
// are a few megabytes. Stop cancels everything still pending without
// running it, so a scheduler never settles or sends anything on its own
// after Stop.
//
// The package imports no broker client and nothing of flow.
package schedule

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/operators/internal/timeheap"
	"github.com/sluicemq/sluice/ports"
)

// ErrStopped is returned when scheduling on a stopped Scheduler.
var ErrStopped = errors.New("schedule: scheduler stopped")

// Options configure a Scheduler. The zero value is ready to use.
type Options struct {
	// OnPanic receives a callback's panic as a *ports.PanicError; the
	// scheduler goes on with the next timer. Default: logged at Error
	// level with slog.Default().
	OnPanic func(error)
	// Clock is the time source (a fake clock in tests). Default: the
	// system clock.
	Clock Clock
}

// Clock is a Scheduler's time source. Tests pass a manual clock to make
// timers fire when they advance it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, like
	// time.AfterFunc. The Scheduler has at most one such timer armed.
	AfterFunc(d time.Duration, f func()) ClockTimer
}

// ClockTimer is the handle returned by Clock.AfterFunc; *time.Timer
// satisfies it.
type ClockTimer interface {
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) ClockTimer { return time.AfterFunc(d, f) }

// Scheduler runs callbacks at their deadlines, in deadline order (ties in
// scheduling order), one at a time on its own goroutine.
//
// Callbacks must be quick and must not block: a slow callback delays every
// later timer (none is lost). Hand blocking work (a broker publish) to a
// goroutine or a channel of your own. Callbacks must not call Stop.
//
// A Scheduler is safe for concurrent use. Its zero value is not usable;
// call New, and Stop when done (the goroutine runs until then).
type Scheduler struct {
	clock   Clock
	start   time.Time
	onPanic func(error)

	mu      sync.Mutex
	h       timeheap.Heap[func()]
	stopped atomic.Bool
	wake    chan struct{} // a new earliest deadline
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped int
}

// New returns a running Scheduler.
func New(opts Options) *Scheduler {
	c := opts.Clock
	if c == nil {
		c = SystemClock{}
	}
	s := &Scheduler{
		clock:   c,
		start:   c.Now(),
		onPanic: opts.OnPanic,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if s.onPanic == nil {
		s.onPanic = func(err error) { slog.Error("sluice schedule: callback panicked", "err", err) }
	}
	go s.loop()
	return s
}

// Timer is one scheduled callback.
type Timer struct {
	e timeheap.Entry[func()]
	s *Scheduler
}

// Cancel stops the timer. It reports true if the callback had not run and
// now never will; false if it already ran, is running, or was cancelled.
func (t *Timer) Cancel() bool {
	if t == nil {
		return false
	}
	t.s.mu.Lock()
	ok := t.s.h.Remove(&t.e)
	t.s.mu.Unlock()
	return ok
}

// After runs fn once d has passed (d <= 0: as soon as possible).
func (s *Scheduler) After(d time.Duration, fn func()) (*Timer, error) {
	return s.at(int64(s.clock.Now().Sub(s.start)+d), fn)
}

// At runs fn at t (a past t: as soon as possible).
func (s *Scheduler) At(t time.Time, fn func()) (*Timer, error) {
	return s.at(int64(t.Sub(s.start)), fn)
}

func (s *Scheduler) at(when int64, fn func()) (*Timer, error) {
	t := &Timer{s: s}
	t.e.When, t.e.Value = when, fn
	s.mu.Lock()
	if s.stopped.Load() {
		s.mu.Unlock()
		return nil, ErrStopped
	}
	s.h.PushEntry(&t.e)
	first := s.h.Peek() == &t.e
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return t, nil
}

// Len returns the number of pending timers.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Len()
}

// Stop cancels every pending timer without running it, waits for a
// callback that is running to return, and stops the goroutine. It returns
// the number of timers cancelled. It is idempotent (later calls return 0).
func (s *Scheduler) Stop() int {
	n := 0
	s.once.Do(func() {
		s.mu.Lock()
		s.stopped.Store(true)
		n = len(s.h.Drain())
		s.mu.Unlock()
		close(s.quit)
		<-s.done
		n += s.dropped
	})
	return n
}

func (s *Scheduler) loop() {
	defer close(s.done)
	var timer ClockTimer
	fired := make(chan struct{}, 1)
	fire := func() {
		select {
		case fired <- struct{}{}:
		default:
		}
	}
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
	var batch []func()
	for {
		now := int64(s.clock.Now().Sub(s.start))
		s.mu.Lock()
		for e := s.h.Peek(); e != nil && e.When <= now; e = s.h.Peek() {
			s.h.Pop()
			batch = append(batch, e.Value)
		}
		next := s.h.Peek()
		var wait int64
		if next != nil {
			wait = next.When - now
		}
		s.mu.Unlock()
		if len(batch) > 0 {
			for i, fn := range batch {
				if s.stopped.Load() {
					s.dropped = len(batch) - i
					break
				}
				s.call(fn)
			}
			clear(batch)
			batch = batch[:0]
			continue // time has passed: look again before sleeping
		}
		if next != nil {
			stopTimer()
			timer = s.clock.AfterFunc(time.Duration(wait), fire)
		}
		select {
		case <-fired:
			timer = nil
		case <-s.wake:
			stopTimer()
		case <-s.quit:
			stopTimer()
			return
		}
	}
}

func (s *Scheduler) call(fn func()) {
	defer func() {
		if v := recover(); v != nil {
			s.onPanic(&ports.PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	fn()
}
