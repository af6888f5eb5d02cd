package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The consumer-kill scenario re-executes the test binary with these
// environment variables; Run then runs a consumer instead of the
// scenarios. The consumer writes one line per event to stdout:
//
//	SLUICE-CHILD READY
//	SLUICE-CHILD GOT <id> <quoted position>
//
// and holds every delivery's completion pending until it is killed.
const (
	childEnv         = "SLUICE_FAULTS_CHILD"
	childAddrEnv     = "SLUICE_FAULTS_ADDR"
	childTopicEnv    = "SLUICE_FAULTS_TOPIC"
	childGroupEnv    = "SLUICE_FAULTS_GROUP"
	childInFlightEnv = "SLUICE_FAULTS_INFLIGHT"
	childIdentityEnv = "SLUICE_FAULTS_IDENTITY"
	childPrefix      = "SLUICE-CHILD "
)

// runChild is the consumer process: it consumes with every completion
// pending, reports what it got, and exits when its stdin closes (the
// parent is gone) if nobody killed it first.
func runChild(t *testing.T, target Target) {
	if os.Getenv(childEnv) == childInbox {
		runInboxChild(t, target)
		return
	}
	say := childOutput()
	inFlight, err := strconv.Atoi(os.Getenv(childInFlightEnv))
	if err != nil {
		t.Fatalf("child: %s: %v", childInFlightEnv, err)
	}
	ctx := context.Background()
	a, err := target.Dial(ctx, os.Getenv(childAddrEnv), os.Getenv(childIdentityEnv))
	if err != nil {
		t.Fatalf("child: dial: %v", err)
	}
	spec := ports.SubscriptionSpec{Topic: ports.Topic(os.Getenv(childTopicEnv)), Group: os.Getenv(childGroupEnv), InFlight: inFlight}
	p := flow.New(a, spec, flow.WithErrorHandler(func(error) {}))
	flow.Sink(p.Source(), func(ctx context.Context, d *ports.Delivery) error {
		pos := ""
		if target.Position != nil {
			pos = target.Position(d)
		}
		say("GOT %s %q", d.ID, pos)
		<-ctx.Done() // the completion stays pending until the process dies
		return ctx.Err()
	}, flow.Workers(inFlight))
	if err := p.Start(ctx); err != nil {
		t.Fatalf("child: start: %v", err)
	}
	say("READY")
	select {} // until SIGKILL (or stdin closes)
}

// childOutput makes a consumer process exit once its stdin closes (the
// parent is gone) and returns its line writer (childPrefix + one line).
// READY is always the first line: Pipeline.Start has already started
// receiving when it returns, so a line about a delivery (a resumed
// session's redelivery comes right after the connection is up) waits
// until READY was written.
func childOutput() func(format string, args ...any) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	var mu sync.Mutex
	ready := make(chan struct{})
	return func(format string, args ...any) {
		if format != "READY" {
			<-ready
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, childPrefix+format+"\n", args...)
		if format == "READY" {
			close(ready)
		}
	}
}

// each calls fn with every line the child writes, in order, on a
// goroutine, and closes the returned channel once the child exited and
// every line was handled.
func (c *child) each(fn func(line string)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case line := <-c.lines:
				fn(line)
			case <-c.exited:
				for {
					select {
					case line := <-c.lines:
						fn(line)
					default:
						return
					}
				}
			}
		}
	}()
	return done
}

// child is a consumer process started by the parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{}
	stderr *bytes.Buffer
	mu     sync.Mutex // guards stderr
}

// startChild re-executes the test binary as a consumer of spec at addr,
// playing the process named identity. env adds to (or overrides) its
// environment.
func (e *env) startChild(addr, identity string, spec ports.SubscriptionSpec, env ...string) *child {
	e.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		e.t.Fatalf("locating the test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run="+runPattern(e.runPath), "-test.timeout=10m")
	cmd.Env = append(os.Environ(),
		childEnv+"=consumer",
		childAddrEnv+"="+addr,
		childIdentityEnv+"="+identity,
		childTopicEnv+"="+string(spec.Topic),
		childGroupEnv+"="+spec.Group,
		childInFlightEnv+"="+strconv.Itoa(spec.WithDefaults().InFlight),
	)
	cmd.Env = append(cmd.Env, env...) // the last value of a name wins
	c := &child{cmd: cmd, lines: make(chan string, 4096), exited: make(chan struct{}), stderr: &bytes.Buffer{}}
	cmd.Stderr = lockedWriter{c}
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting the consumer process: %v", err)
	}
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if s, ok := strings.CutPrefix(line, childPrefix); ok {
				c.lines <- s
			} else {
				c.mu.Lock()
				c.stderr.WriteString(line + "\n")
				c.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = c.stdin.Close()
		<-c.exited
	})
	return c
}

// output is what the child wrote besides its event lines.
func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

type lockedWriter struct{ c *child }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.stderr.Write(p)
}

// runPattern is the -test.run pattern that selects exactly the test path.
func runPattern(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// next returns the next line the child wrote, failing after timeout or
// when the child exited.
func (c *child) next(e *env, what string) string {
	e.t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-c.exited:
		select {
		case l := <-c.lines:
			return l
		default:
		}
		e.t.Fatalf("the consumer process exited while waiting for %s; its output:\n%s", what, c.output())
	case <-time.After(e.target.Timeout):
		e.t.Fatalf("timed out after %v waiting for the consumer process: %s", e.target.Timeout, what)
	}
	return ""
}

// kill SIGKILLs the child and waits until it is gone.
func (c *child) kill(e *env) {
	e.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(e.target.Timeout):
		e.t.Fatalf("the consumer process survived SIGKILL for %v", e.target.Timeout)
	}
}

// parseGot parses "GOT <id> <quoted position>".
func parseGot(line string) (id, pos string, ok bool) {
	rest, found := strings.CutPrefix(line, "GOT ")
	if !found {
		return "", "", false
	}
	id, q, found := strings.Cut(rest, " ")
	if !found {
		return "", "", false
	}
	pos, err := strconv.Unquote(q)
	if err != nil {
		return "", "", false
	}
	return id, pos, true
}
