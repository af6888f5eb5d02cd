// Package schedule is the module's one clock, timer heap and scheduler,
// at the bottom of the import graph: flow's operators and the adapters
// both build on it, and it imports nothing of them (only ports, for
// PanicError). [Heap] is the timer heap; a [Scheduler] keeps any number of
// pending timers on one Heap driven by one clock timer, for the Delay and
// window operators and for the adapters' delay fallbacks (directly, or
// through adapters/portable and adapters/kit's Delayer): delayed messages
// (ports.Message.Delay) and delayed requeues (ports.Disposition.Delay) on
// brokers without native delay.
//
// A Scheduler costs one heap entry per pending timer (no goroutine, no
// runtime timer per entry; no goroutine at all while nothing is due):
// 100k pending timers are a few megabytes. A [Clock] option lets tests
// drive it with a manual clock. Stop cancels everything still pending
// without running it, so a scheduler never settles or sends anything on
// its own after Stop.
//
// The package imports no broker client and nothing of flow.
package schedule

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

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
// scheduling order), one at a time.
//
// It holds no goroutine of its own: one clock timer is armed for the
// earliest deadline, and when it fires, the due callbacks run on the
// timer's goroutine, one after another. Idle, or with every timer far in
// the future, a Scheduler costs no goroutine at all.
//
// Callbacks must be quick and must not block: a slow callback delays every
// later timer (none is lost). Hand blocking work (a broker publish) to a
// goroutine or a channel of your own (adapters/kit's Delayer does).
// Callbacks must not call Stop.
//
// A Scheduler is safe for concurrent use. Its zero value is not usable;
// call New, and Stop when done.
type Scheduler struct {
	clock   Clock
	start   time.Time
	onPanic func(error)

	mu      sync.Mutex
	idle    sync.Cond // signalled when running becomes false
	h       Heap[func()]
	timer   ClockTimer // armed for armedAt; nil when disarmed
	armedAt int64
	gen     uint64 // of the armed timer; a stale timer's fire is ignored
	running bool   // a fire is running callbacks
	stopped bool
	dropped int // due callbacks skipped because Stop came while running
}

// New returns a ready Scheduler.
func New(opts Options) *Scheduler {
	c := opts.Clock
	if c == nil {
		c = SystemClock{}
	}
	s := &Scheduler{
		clock:   c,
		start:   c.Now(),
		onPanic: opts.OnPanic,
	}
	s.idle.L = &s.mu
	if s.onPanic == nil {
		s.onPanic = func(err error) { slog.Error("sluice schedule: callback panicked", "err", err) }
	}
	return s
}

// Timer is one scheduled callback.
type Timer struct {
	e Entry[func()]
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
	return s.at(s.now()+int64(d), fn)
}

// At runs fn at t (a past t: as soon as possible).
func (s *Scheduler) At(t time.Time, fn func()) (*Timer, error) {
	return s.at(int64(t.Sub(s.start)), fn)
}

func (s *Scheduler) now() int64 { return int64(s.clock.Now().Sub(s.start)) }

func (s *Scheduler) at(when int64, fn func()) (*Timer, error) {
	t := &Timer{s: s}
	t.e.When, t.e.Value = when, fn
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, ErrStopped
	}
	s.h.PushEntry(&t.e)
	// A running fire re-arms for the earliest entry when it is done.
	if !s.running && (s.timer == nil || when < s.armedAt) {
		s.armLocked(when)
	}
	return t, nil
}

// armLocked arms the one clock timer for when.
func (s *Scheduler) armLocked(when int64) {
	if s.timer != nil {
		s.timer.Stop() // a timer that fired anyway finds nothing due: harmless
	}
	s.armedAt = when
	s.gen++
	gen := s.gen
	s.timer = s.clock.AfterFunc(time.Duration(max(when-s.now(), 0)), func() { s.fire(gen) })
}

// Len returns the number of pending timers.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Len()
}

// Stop cancels every pending timer without running it, waits for a
// callback that is running to return, and disarms the clock timer. It
// returns the number of timers cancelled. It is idempotent (later calls
// return 0). Callbacks must not call it.
func (s *Scheduler) Stop() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0
	}
	s.stopped = true
	n := len(s.h.Drain())
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	for s.running {
		s.idle.Wait()
	}
	return n + s.dropped
}

// fire runs every due callback, in order, then re-arms for the next
// deadline. A spurious or late call is harmless.
func (s *Scheduler) fire(gen uint64) {
	s.mu.Lock()
	if s.stopped || s.running || gen != s.gen || s.timer == nil {
		s.mu.Unlock()
		return
	}
	s.running = true
	s.timer = nil
	var batch []func()
	for {
		now := s.now()
		for e := s.h.Peek(); e != nil && e.When <= now; e = s.h.Peek() {
			s.h.Pop()
			batch = append(batch, e.Value)
		}
		if len(batch) == 0 || s.stopped {
			break
		}
		s.mu.Unlock()
		for i, fn := range batch {
			if i > 0 && s.isStopped() {
				s.mu.Lock()
				s.dropped += len(batch) - i
				s.mu.Unlock()
				break
			}
			s.call(fn)
			batch[i] = nil
		}
		batch = batch[:0]
		s.mu.Lock() // time has passed: look again before re-arming
	}
	if next := s.h.Peek(); next != nil && !s.stopped {
		s.armLocked(next.When)
	}
	s.running = false
	s.idle.Broadcast()
	s.mu.Unlock()
}

func (s *Scheduler) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *Scheduler) call(fn func()) {
	defer func() {
		if v := recover(); v != nil {
			s.onPanic(&ports.PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	fn()
}
