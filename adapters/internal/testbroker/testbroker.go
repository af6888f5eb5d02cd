// Package testbroker holds what the in-repo test brokers (rabbittest,
// activemqtest, redistest) share: one broker per test binary, one per
// test, the rule that a broker not installed here skips a test unless CI
// is "true", and stopping a broker's process by PID.
package testbroker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Broker is a started test broker.
type Broker interface{ Stop() error }

// Shared is one broker per test binary, started on first use by Get and
// stopped by Stop (from TestMain, after m.Run).
type Shared[B Broker] struct {
	Name         string // the package, for messages: "rabbittest"
	NotInstalled error  // Start's error when the broker is not installed
	Start        func() (B, error)

	once    sync.Once
	b       B
	err     error
	started bool
}

// Get returns the shared broker, starting it on first use; see Check for
// a broker that is missing or does not start.
func (s *Shared[B]) Get(t testing.TB) B {
	t.Helper()
	s.once.Do(func() {
		s.b, s.err = s.Start()
		s.started = s.err == nil
	})
	Check(t, s.Name, s.NotInstalled, s.err)
	return s.b
}

// Stop stops the broker Get started, if any.
func (s *Shared[B]) Stop() error {
	if !s.started {
		return nil
	}
	return s.b.Stop()
}

// Own starts a broker for t alone (for tests that restart or break it)
// and stops it when t ends; see Check for a broker that is missing or
// does not start.
func Own[B Broker](t testing.TB, name string, notInstalled error, start func() (B, error)) B {
	t.Helper()
	b, err := start()
	Check(t, name, notInstalled, err)
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("%s: stop: %v", name, err)
		}
	})
	return b
}

// Check fails t on err, except that a broker not installed here
// (notInstalled) skips t with the reason when CI is not "true": in CI a
// missing broker is an error.
func Check(t testing.TB, name string, notInstalled, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, notInstalled) && os.Getenv("CI") != "true":
		t.Skipf("skipping: %v (set CI=true to make this a failure)", err)
	default:
		t.Fatalf("%s: %v", name, err)
	}
}

// Terminate sends SIGTERM to p, waits for exited (closed when p was
// reaped), and falls back to SIGKILL after grace, which it reports.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) error {
	select {
	case <-exited:
		return nil
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-exited
	return fmt.Errorf("pid %d did not stop within %v; killed", p.Pid, grace)
}

// PID is cmd's process id, 0 when cmd has not started one.
func PID(cmd *exec.Cmd) int {
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}
