package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

// lines is a slog handler that hands every record's text to a channel.
type lines chan string

func (l lines) Enabled(context.Context, slog.Level) bool { return true }
func (l lines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	select {
	case l <- b.String():
	default:
	}
	return nil
}
func (l lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l lines) WithGroup(string) slog.Handler      { return l }

// await returns the first line containing want, or fails after 20 s.
func (l lines) await(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line := <-l:
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			t.Fatalf("no log line containing %q within 20s", want)
			return ""
		}
	}
}

// A consumer killed with SIGKILL while it holds an entry, restarted under
// the same consumer name, gets the entry back at once (from its own
// pending entries), not after claim_min_idle (30 s here); its start line
// says how long other consumers' pending entries wait.
func TestKilledConsumerRestartedUnderItsNameRereadsItsPendingAtOnce(t *testing.T) {
	if url := os.Getenv("SLUICE_REDIS_CHILD_URL"); url != "" {
		holdOne(t, url)
		return
	}
	ns := namespace("own")
	url := "redis://" + sharedAddr(t) + "/0?claim_min_idle=30s&consumer=worker-1&namespace=" + ns
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledConsumerRestartedUnderItsNameRereadsItsPendingAtOnce$", "-test.count=1")
	child.Env = append(os.Environ(), "SLUICE_REDIS_CHILD_URL="+url)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	held := ""
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if id, ok := strings.CutPrefix(sc.Text(), "HELD "); ok {
			held = id
			break
		}
	}
	_ = child.Process.Kill() // SIGKILL: nothing is released
	_ = child.Wait()
	if held == "" {
		t.Fatal("the child consumer never held the entry")
	}

	logs := make(lines, 64)
	a, err := adapters.Open(ctx, url, adapters.WithLogger(slog.New(logs)), adapters.NotExclusive())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "jobs", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	start := logs.await(t, "consumer=worker-1")
	if !strings.Contains(start, "claim_min_idle=30s") {
		t.Errorf("start line %q does not say how long other consumers' entries wait", start)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	ds, err := sub.Receive(rctx, 1)
	if err != nil {
		t.Fatalf("the restarted consumer did not get its pending entry back within 10s (claim_min_idle is 30s): %v", err)
	}
	if ds[0].ID != held || ds[0].RedeliveryCount != 1 {
		t.Fatalf("got %s (redelivery %d), want %s redelivered once", ds[0].ID, ds[0].RedeliveryCount, held)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// holdOne is the child: it receives one entry, says so and waits to be
// killed.
func holdOne(t *testing.T, url string) {
	ctx := context.Background()
	a, err := adapters.Open(ctx, url, adapters.NotExclusive())
	if err != nil {
		t.Fatal(err)
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "jobs", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "jobs", Payload: []byte(`{"job":1}`)}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("HELD " + ds[0].ID)
	select {} // until SIGKILL
}

// redis://:password@host is Redis' requirepass form: a password without a
// user name. A wrong one is ports.ErrAuth.
func TestRequirepassURL(t *testing.T) {
	srv := redistest.Own(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Protocol: 2})
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "requirepass", "s3cret-pw").Err(); err != nil {
		t.Fatal(err)
	}
	a, err := adapters.Open(ctx, "redis://:s3cret-pw@"+srv.Addr+"/0?durability=none", adapters.NotExclusive())
	if err != nil {
		t.Fatalf("Open with :password@: %v", err)
	}
	defer a.Close(context.Background())
	if err := a.Send(ctx, ports.Message{Topic: "pw", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	_, err = adapters.Open(ctx, "redis://:wr0ng-pw@"+srv.Addr+"/0?durability=none", adapters.NotExclusive())
	if !errors.Is(err, ports.ErrAuth) || strings.Contains(err.Error(), "wr0ng-pw") {
		t.Fatalf("Open with a wrong password = %v, want ports.ErrAuth without the password", err)
	}
}

// go-redis's own log lines (here: the pool's failed dial) go to the
// adapter's logger, not to stderr.
func TestClientLogGoesToTheAdapterLogger(t *testing.T) {
	logs := make(lines, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := redis.New(ctx, redis.Options{Addr: "127.0.0.1:1", Durability: redis.DurabilityNone, Logger: slog.New(logs)})
	logs.await(t, "failed to dial")
	if !errors.Is(err, ports.ErrRefused) {
		t.Fatalf("New on a closed port = %v, want ports.ErrRefused", err)
	}
}
