package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/examples/internal/readme"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) {
	runChild() // the crash test's child process runs the tool here
	code := m.Run()
	if err := rabbittest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping RabbitMQ:", err)
		code = max(code, 1)
	}
	if code == 0 {
		// adapters/all links the RocketMQ client, whose opencensus
		// dependency starts this worker at init, for the process's life.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// session is the README's session: each line one run of the tool.
var session = []string{
	`-demo 6 list orders --group billing`,
	`stats orders --group billing`,
	`show orders order-3 --group billing`,
	`show orders order-3 --group billing --reveal --operator alice --note "schema ticket 812"`,
	`redrive orders --group billing --reason negative --operator alice --note "total check fixed in 1.4.2" --dry-run`,
	`redrive orders --group billing --reason negative --operator alice --note "total check fixed in 1.4.2"`,
	`purge orders --group billing --ids order-6 --operator alice --note "staging test order"`,
	`-json list orders --group billing`,
	`audit orders --group billing`,
}

// TestSessionMatchesREADME runs the session, each line as a new process
// would (a new adapter) on one mem broker, and compares what it prints
// with the README's expected output.
func TestSessionMatchesREADME(t *testing.T) {
	b, err := mem.NewBroker(mem.WithClock(stoppedClock{failedAt}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close(context.Background()) }()
	out := runSession(t, func() (ports.Adapter, error) { return mem.New(b) })
	readme.Check(t, out)
}

// failedAt is the mem broker's time in the README session: when the demo
// orders were dead-lettered.
var failedAt = time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)

// stoppedClock is a clock that does not move (the session sets no timer).
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }
func (c stoppedClock) AfterFunc(d time.Duration, f func()) schedule.ClockTimer {
	return time.AfterFunc(d, f) // never armed by the session; a real timer if it were
}

// runSession runs the session, each line on a new adapter from open, with
// fixed audit ids and clock, and returns what it printed.
func runSession(t *testing.T, open func() (ports.Adapter, error)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := 0
	newID = func() string { ids++; return "audit-" + strconv.Itoa(ids) }
	now = func() time.Time { return time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC) }
	defer func() { newID, now = nil, time.Now }()

	var out strings.Builder
	for _, line := range session {
		fmt.Fprintf(&out, "$ dlq %s\n", line)
		a, err := open()
		if err != nil {
			t.Fatal(err)
		}
		g, args := globalsOf(t, line)
		g.logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := run(ctx, a, g, args, &out); err != nil {
			_ = a.Close(ctx)
			t.Fatalf("%s: %v\noutput so far:\n%s", line, err, out.String())
		}
		if err := a.Close(ctx); err != nil {
			t.Fatalf("%s: Close: %v", line, err)
		}
	}
	return out.String()
}

// globalsOf splits a session line into the global flags and the command
// line, honouring double quotes.
func globalsOf(t *testing.T, line string) (globals, []string) {
	var args []string
	for i, part := range strings.Split(line, `"`) {
		if i%2 == 1 {
			args = append(args, part)
			continue
		}
		args = append(args, strings.Fields(part)...)
	}
	var g globals
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-json":
			g.json, args = true, args[1:]
		case "-demo":
			n, err := strconv.Atoi(args[1])
			if err != nil {
				t.Fatal(err)
			}
			g.demo, args = n, args[2:]
		default:
			t.Fatalf("unknown global flag %s", args[0])
		}
	}
	return g, args
}
