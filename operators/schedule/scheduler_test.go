package schedule_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunsInDeadlineOrder(t *testing.T) {
	s := schedule.New(schedule.Options{})
	defer s.Stop()
	var mu sync.Mutex
	var got []int
	done := make(chan struct{})
	base := time.Now().Add(20 * time.Millisecond)
	order := []int{3, 1, 4, 0, 2}
	for _, i := range order {
		if _, err := s.At(base.Add(time.Duration(i)*time.Millisecond), func() {
			mu.Lock()
			got = append(got, i)
			if len(got) == len(order) {
				close(done)
			}
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("timers did not all fire within 5s")
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("fired in order %v, want 0..4", got)
		}
	}
	if time.Now().Before(base) {
		t.Fatal("fired before the deadline")
	}
}

func TestCancelPreventsRun(t *testing.T) {
	s := schedule.New(schedule.Options{})
	defer s.Stop()
	var ran atomic.Bool
	tm, _ := s.After(30*time.Millisecond, func() { ran.Store(true) })
	fired := make(chan struct{})
	if _, err := s.After(60*time.Millisecond, func() { close(fired) }); err != nil {
		t.Fatal(err)
	}
	if !tm.Cancel() {
		t.Fatal("Cancel of a pending timer returned false")
	}
	if tm.Cancel() {
		t.Fatal("second Cancel returned true")
	}
	<-fired // a later timer fired, so the cancelled one's deadline passed
	if ran.Load() {
		t.Fatal("cancelled callback ran")
	}
}

func TestStopCancelsPendingWithoutRunning(t *testing.T) {
	s := schedule.New(schedule.Options{})
	var ran atomic.Int32
	for range 1000 {
		if _, err := s.After(time.Hour, func() { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("Len = %d, want 1000", n)
	}
	if n := s.Stop(); n != 1000 {
		t.Fatalf("Stop cancelled %d, want 1000", n)
	}
	if s.Stop() != 0 {
		t.Fatal("second Stop reported cancellations")
	}
	if ran.Load() != 0 {
		t.Fatal("Stop ran callbacks")
	}
	if _, err := s.After(0, func() {}); !errors.Is(err, schedule.ErrStopped) {
		t.Fatalf("After on a stopped scheduler: %v, want ErrStopped", err)
	}
}

func TestPanicIsReportedAndLaterTimersRun(t *testing.T) {
	reported := make(chan error, 1)
	s := schedule.New(schedule.Options{OnPanic: func(err error) { reported <- err }})
	defer s.Stop()
	_, _ = s.After(0, func() { panic("boom") })
	ok := make(chan struct{})
	_, _ = s.After(time.Millisecond, func() { close(ok) })
	select {
	case err := <-reported:
		var pe *ports.PanicError
		if !errors.As(err, &pe) || pe.Value != "boom" {
			t.Fatalf("reported %v, want a PanicError", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("panic not reported within 5s")
	}
	select {
	case <-ok:
	case <-time.After(5 * time.Second):
		t.Fatal("scheduler stopped after a panicking callback")
	}
}

func TestHundredThousandPendingFireAll(t *testing.T) {
	s := schedule.New(schedule.Options{})
	defer s.Stop()
	const n = 100_000
	var fired atomic.Int32
	done := make(chan struct{})
	base := time.Now()
	for i := range n {
		d := time.Duration(i%1000) * 50 * time.Microsecond // spread over 50ms
		if _, err := s.At(base.Add(d), func() {
			if fired.Add(1) == n {
				close(done)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d timers fired within 20s", fired.Load(), n)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after all fired", s.Len())
	}
}

// manualClock is a Clock that moves only when the test advances it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *manualClock
	at   time.Time
	f    func()
	done bool
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) schedule.ClockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves the clock and runs, synchronously, every timer now due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*manualTimer
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.now) {
			t.done = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

func TestManualClockDrivesTimers(t *testing.T) {
	c := &manualClock{now: time.Unix(1000, 0)}
	s := schedule.New(schedule.Options{Clock: c})
	defer s.Stop()
	var got []int
	for _, i := range []int{3, 1, 2} {
		if _, err := s.After(time.Duration(i)*time.Second, func() { got = append(got, i) }); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Second - time.Nanosecond)
	if len(got) != 0 {
		t.Fatalf("ran %v before the first deadline", got)
	}
	c.Advance(time.Nanosecond)
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("after 1s: %v, want [1]", got)
	}
	c.Advance(time.Hour)
	if len(got) != 3 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("after 1h: %v, want [1 2 3]", got)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}
