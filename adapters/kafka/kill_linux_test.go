package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// killChildEnv, when set to a broker address, makes
// TestConsumerKilledBetweenRecordAndCommit run as the consumer process.
const killChildEnv = "SLUICE_KAFKA_KILL_CHILD"

// killConfig commits only on Flush, revoke and stop: a settlement stays
// recorded and uncommitted for as long as the process lives.
func killConfig(addr string) kafka.Options {
	return manualCommits(kafka.Options{
		Brokers:           []string{addr},
		Namespace:         "kill",
		Partitions:        2,
		HeartbeatInterval: testHeartbeat,
		SessionTimeout:    testSession,
		RebalanceTimeout:  testRebalance,
		CommitRetry:       50 * time.Millisecond,
	})
}

var killSpec = ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64}

// TestConsumerKilledBetweenRecordAndCommit: a consumer process whose
// Settle(ACK) calls returned (the offsets are recorded, deferred) is
// SIGKILLed before its committer sends them. Nothing is lost: the group's
// committed offsets never moved, and a new consumer in the group gets
// every one of those messages again (LEDGER lost=0, each redelivery in the
// in-flight window).
func TestConsumerKilledBetweenRecordAndCommit(t *testing.T) {
	if addr := os.Getenv(killChildEnv); addr != "" {
		runKillChild(t, addr)
		return
	}
	if realKafka() {
		t.Skip("runs on its own kfake cluster")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	b := &broker{addrs: []string{addr}, cluster: c}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	l := tck.NewLedger("kafka", "consumer-kill-after-record")
	l.SetPosition(func(d *ports.Delivery) string {
		return d.Facts.Get("topic") + "/" + d.Facts.Get("partition") + "@" + d.Facts.Get("offset")
	})

	ch := startKillChild(t, addr)
	if line := ch.next(t, "the consumer process to subscribe"); line != "READY" {
		t.Fatalf("consumer process said %q, want READY", line)
	}
	a := b.adapter(t, killConfig(addr))
	const n = 40
	msgs := make([]ports.Message, n)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: killSpec.Topic, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	if err := l.Send(ctx, a, msgs...); err != nil {
		t.Fatalf("send: %v", err)
	}

	// The child receives the n messages, settles what each Receive
	// returned with one Settle (nil: recorded) and only then reports each
	// with its position.
	var recorded []string
	lowest := map[string]int64{} // partition -> lowest recorded offset
	for len(recorded) < n {
		line := ch.next(t, "the consumer process to record its settlements")
		if line == "SETTLED" {
			continue
		}
		rest, ok := strings.CutPrefix(line, "RECORDED ")
		if !ok {
			t.Fatalf("unexpected line from the consumer process: %q", line)
		}
		f := strings.Fields(rest) // id partition offset
		if len(f) != 3 {
			t.Fatalf("malformed line %q", line)
		}
		off, _ := strconv.ParseInt(f[2], 10, 64)
		if lo, seen := lowest[f[1]]; !seen || off < lo {
			lowest[f[1]] = off
		}
		l.Delivered(f[0], "kill.t/"+f[1]+"@"+f[2])
		recorded = append(recorded, f[0])
	}
	// Recorded, not committed: the committed offsets did not move past
	// any recorded offset.
	for p, lo := range lowest {
		id, _ := strconv.Atoi(p)
		if got := b.committed(t, "kill.g", "kill.t", int32(id)); got > lo {
			t.Fatalf("partition %s committed at %d before the kill, past the recorded offset %d: the test did not hit the window", p, got, lo)
		}
	}
	l.Mark("kill")
	ch.kill(t)
	l.Died(recorded...)
	t.Logf("SIGKILLed the consumer process (pid %d) with %d settlements recorded and none committed", ch.cmd.Process.Pid, len(recorded))

	// The restarted consumer gets them all again.
	a2 := b.adapter(t, killConfig(addr))
	p := flow.New(a2, killSpec, l.Observer(), flow.WithErrorHandler(func(error) {}))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	if err := l.AwaitSettled(ctx); err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	r := l.Check(t)
	if got := r.Windows[tck.WindowInFlight].Count; got < n {
		t.Fatalf("%d of the %d recorded-but-uncommitted messages redelivered: %+v", got, n, r.Windows)
	}
}

// runKillChild is the consumer process: it subscribes, receives the
// messages, settles them with one Settle(ACK) — recorded, never committed
// (manual commits) — and waits to be killed.
func runKillChild(t *testing.T, addr string) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3) // the parent is gone
	}()
	ctx := context.Background()
	a, err := kafka.New(ctx, killConfig(addr))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	s, err := a.Subscribe(ctx, killSpec)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	fmt.Println("READY")
	for {
		ds, err := s.Receive(ctx, killSpec.InFlight)
		if err != nil {
			t.Fatalf("child: receive: %v", err)
		}
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatalf("child: settle: %v", err)
		}
		for _, d := range ds {
			fmt.Printf("RECORDED %s %s %s\n", d.ID, d.Facts.Get("partition"), d.Facts.Get("offset"))
		}
		if len(ds) > 0 {
			// Every Receive so far is recorded; the parent counts lines.
			fmt.Println("SETTLED")
		}
	}
}

type killChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{}
}

func startKillChild(t *testing.T, addr string) *killChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestConsumerKilledBetweenRecordAndCommit$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), killChildEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with this test process
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := &killChild{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	if ch.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the consumer process: %v", err)
	}
	go func() {
		defer close(ch.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); line == "READY" || line == "SETTLED" || strings.HasPrefix(line, "RECORDED ") {
				ch.lines <- line
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = ch.stdin.Close()
		<-ch.exited
	})
	return ch
}

func (c *killChild) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-c.exited:
		select {
		case l := <-c.lines:
			return l
		default:
		}
		t.Fatalf("the consumer process exited while waiting for %s", what)
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out after 30s waiting for %s", what)
	}
	return ""
}

func (c *killChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer process survived SIGKILL for 30s")
	}
}
