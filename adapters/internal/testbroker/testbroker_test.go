package testbroker

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

type fake struct{ stops int }

func (f *fake) Stop() error { f.stops++; return nil }

func TestSharedStartsOnceAndStopsWhatItStarted(t *testing.T) {
	starts := 0
	s := Shared[*fake]{Name: "faketest", Start: func() (*fake, error) { starts++; return &fake{}, nil }}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop before Get: %v", err)
	}
	a, b := s.Get(t), s.Get(t)
	if starts != 1 || a != b {
		t.Fatalf("started %d brokers, want one shared", starts)
	}
	if err := s.Stop(); err != nil || a.stops != 1 {
		t.Fatalf("Stop = %v after %d stops, want one stop", err, a.stops)
	}
}

func TestSharedDoesNotStopAFailedStart(t *testing.T) {
	s := Shared[*fake]{Name: "faketest", Start: func() (*fake, error) { return nil, errors.New("no") }}
	s.once.Do(func() { s.b, s.err = s.Start() }) // as Get, without failing this test
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop after a failed start: %v", err)
	}
}

func TestTerminateStopsAProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := Terminate(cmd.Process, exited, 10*time.Second); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if err := Terminate(cmd.Process, exited, time.Second); err != nil {
		t.Fatalf("Terminate of an exited process: %v", err)
	}
	if cmd.ProcessState.ExitCode() != -1 {
		t.Fatalf("process state %v, want ended by a signal", cmd.ProcessState)
	}
}
