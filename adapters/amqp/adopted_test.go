package amqp_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
)

// logBuffer collects log lines written from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) line(t *testing.T, queue string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, "sluice amqp: subscribed") && strings.Contains(l, queue) {
			return l
		}
	}
	t.Fatalf("no subscription line for %s in:\n%s", queue, b.buf.String())
	return ""
}

// TestAdoptedQueueLogsItsActualType: the adapter's capabilities are those
// of its queue type (quorum: an exact redelivery count), but an adopted
// queue is whatever it was declared as. Subscribe says so: an adopted
// classic queue (declared with the type, or without, the default) is
// logged at Info with its type and a redelivery count that is not exact;
// an adopted quorum queue and the adapter's own queues at Debug with
// theirs. Nothing about the adopted queues changes.
func TestAdoptedQueueLogsItsActualType(t *testing.T) {
	node := rabbittest.Shared(t)
	ns := namespace("adopt")
	conn, err := amqp091.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]amqp091.Table{
		ns + ".classic": {"x-queue-type": "classic", "x-message-ttl": int64(60_000)},
		ns + ".untyped": nil,
		ns + ".quorum":  {"x-queue-type": "quorum"},
	}
	groups := map[amqp.ExistingGroup]string{}
	for q, args := range queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		defer ch.QueueDelete(q, false, false, false)
		groups[amqp.ExistingGroup{Topic: "legacy", Group: strings.TrimPrefix(q, ns+".")}] = q
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newAdapter(t, amqp.Options{Namespace: ns, Logger: logger, Existing: &amqp.Existing{Groups: groups}})
	if !a.Capabilities().ExactRedeliveryCount {
		t.Fatal("a quorum adapter must declare an exact redelivery count")
	}
	for g := range groups {
		_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "legacy", Group: g.Group})
	}
	_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "legacy", Group: "own"})
	for q, want := range map[string][]string{
		ns + ".classic":       {"level=INFO", "adopted=true", "queue_type=classic", "exact_redelivery_count=false"},
		ns + ".untyped":       {"level=INFO", "adopted=true", "queue_type=classic", "exact_redelivery_count=false"},
		ns + ".quorum":        {"level=DEBUG", "adopted=true", "queue_type=quorum", "exact_redelivery_count=true"},
		ns + "/legacy/lb/own": {"level=DEBUG", "adopted=false", "queue_type=quorum", "exact_redelivery_count=true"},
	} {
		l := logs.line(t, q)
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("%s: line %q lacks %q", q, l, w)
			}
		}
	}
	// Learning the type changed nothing: the classic queue still has its
	// arguments (a declaration with them is a no-op).
	if _, err := ch.QueueDeclare(ns+".classic", true, false, false, false, queues[ns+".classic"]); err != nil {
		t.Fatalf("the adopted classic queue changed: %v", err)
	}
}
