package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

// childEnv makes the test binary run the tool's main with the arguments in
// childArgs (one per line), so the test can SIGKILL a real process.
const (
	childEnv  = "DLQ_TEST_CHILD"
	childArgs = "DLQ_TEST_ARGS"
)

// runChild runs main as the tool, and exits, when the test binary was
// re-executed as the crash test's child; otherwise it returns at once.
func runChild() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	os.Args = append([]string{"dlq"}, splitLines(os.Getenv(childArgs))...)
	main()
	os.Exit(0)
}

func splitLines(s string) []string { return strings.Split(s, "\n") }

// TestRedriveKilledMidwayOnRedis seeds a real redis-server's dead-letter
// area, starts the tool's redrive as a separate process, SIGKILLs it once
// it has confirmed at least two batches, and finishes with a second
// redrive: every message reached the target, none was lost, and the
// duplicates are at most one batch.
func TestRedriveKilledMidwayOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a redis-server and a child process")
	}
	const n, batch = 120, 10
	srv := redistest.Own(t, redistest.Options{Durable: true})
	// The killed child's unsettled dead letters are pending for a dead
	// consumer until they have been idle for claim_min_idle.
	url := "redis://" + srv.Addr + "/0?claim_min_idle=1s"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := adapters.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	area, err := deadletter.New(a, "payments", "ops", deadletter.Options{Logger: quiet, Batch: batch, Idle: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := seed(ctx, a, area, n); err != nil {
		t.Fatal(err)
	}
	if err := ports.DeclareGroup(ctx, a, "fixed", "check"); err != nil && !errors.Is(err, ports.ErrUnsupported) {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childArgs+"="+
		"-url\n"+url+"\nredrive\npayments\n--group\nops\n--to\nfixed\n--batch\n"+strconv.Itoa(batch)+"\n--operator\ntest\n--note\nkilled midway")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sent := regexp.MustCompile(`\((\d+) sent\)`)
	seen := 0
	r := bufio.NewReader(stderr)
	for seen < 2*batch {
		line, err := r.ReadString('\r')
		if m := sent.FindStringSubmatch(line); m != nil {
			seen, _ = strconv.Atoi(m[1])
		}
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("the child ended before two batches were confirmed (%d sent): %v", seen, err)
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if err := cmd.Wait(); err == nil {
		t.Fatal("the child finished before it was killed: raise n")
	}
	if seen >= n {
		t.Fatalf("the child had sent all %d before it was killed: raise n", n)
	}

	// As an operator would: redrive again until nothing is left (what the
	// killed process held comes back once the broker reclaims it).
	done := 0
	for run := 1; ; run++ {
		res, err := area.Redrive(ctx, deadletter.Request{Operator: "test", Note: "after the kill", Target: "fixed"})
		if err != nil {
			t.Fatalf("redrive %d after the kill: %v", run, err)
		}
		done += res.Done
		left, _, err := area.List(ctx, deadletter.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Selected) == 0 && len(left) == 0 {
			break
		}
		if run == 10 {
			t.Fatalf("after %d redrives the area still holds %d", run, len(left))
		}
	}
	total, distinct := drain(ctx, t, a, "fixed", "check")
	t.Logf("killed after %d confirmed; the redrives after it sent %d; the target holds %d (%d distinct)", seen, done, total, distinct)
	if distinct != n {
		t.Fatalf("%d distinct messages reached the target, want %d: a redrive lost some", distinct, n)
	}
	if dup := total - n; dup > batch {
		t.Fatalf("%d duplicates, want at most one batch (%d)", dup, batch)
	}
}

// drain receives everything on topic's group until it has been idle for a
// second, and returns the deliveries and distinct ids seen.
func drain(ctx context.Context, t *testing.T, a ports.Adapter, topic ports.Topic, group string) (total, distinct int) {
	t.Helper()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: group, InFlight: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Stop(context.Background()) }()
	ids := map[string]bool{}
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ds, err := sub.Receive(rctx, 100)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return total, len(ids)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			ids[d.ID] = true
		}
		total += len(ds)
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}
