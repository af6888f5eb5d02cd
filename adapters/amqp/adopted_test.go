package amqp_test

import (
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/ports"
)

// TestAdoptedQueuesAreUsedAsTheyAre: adopted queues of any type and
// arguments are checked to exist (by New, and by DeclareTopic, whose
// retention is the queue's own business), consumed, and never changed.
// Subscribe says at Info that an adopted queue is used as it is, since the
// adapter's capabilities (quorum: an exact redelivery count) are not
// necessarily the queue's; the adapter's own queues get no such line. A
// queue deleted after New fails DeclareTopic with the adopted name.
func TestAdoptedQueuesAreUsedAsTheyAre(t *testing.T) {
	ns := namespace("adopt")
	ch := rawChannel(t)
	queues := map[string]amqp091.Table{
		ns + ".classic": {"x-queue-type": "classic", "x-message-ttl": int64(60_000)},
		ns + ".untyped": nil,
		ns + ".quorum":  {"x-queue-type": "quorum"},
		ns + ".gone":    nil,
	}
	groups := map[amqp.ExistingGroup]string{}
	for q, args := range queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		defer ch.QueueDelete(q, false, false, false)
		groups[amqp.ExistingGroup{Topic: "legacy", Group: strings.TrimPrefix(q, ns+".")}] = q
	}
	before := map[string]string{}
	for q := range queues {
		before[q] = queueArgs(t, q)
	}
	logs := &opentest.LogBuffer{}
	a := newAdapter(t, amqp.Options{Namespace: ns, Logger: logs.Logger(), Existing: &amqp.Existing{Groups: groups}})
	if _, err := ch.QueueDelete(ns+".gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	spec := ports.TopicSpec{Topic: "legacy", Retention: time.Hour, Groups: []string{"gone"}}
	if err := ports.DeclareTopic(testCtx(t), a, spec); err == nil || !strings.Contains(err.Error(), ns+".gone") {
		t.Fatalf("DeclareTopic over a deleted adopted queue returned %v, want an error naming it", err)
	}
	spec.Groups = []string{"classic", "untyped", "quorum", "own"}
	if err := ports.DeclareTopic(testCtx(t), a, spec); err != nil {
		t.Fatalf("DeclareTopic over adopted queues: %v", err)
	}
	for _, g := range spec.Groups {
		_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "legacy", Group: g})
	}
	adoptedLines := map[any]string{}
	for _, r := range logs.Records(t) {
		if strings.Contains(r["msg"].(string), "adopted queue") {
			adoptedLines[r["queue"]] = r["level"].(string)
		}
	}
	for _, g := range []string{"classic", "untyped", "quorum"} {
		if q := ns + "." + g; adoptedLines[q] != "INFO" {
			t.Errorf("no Info line says adopted queue %s is used as it is: %v", q, adoptedLines)
		}
	}
	if len(adoptedLines) != 3 {
		t.Errorf("adopted-queue lines for %v, want the three adopted queues only", adoptedLines)
	}
	for _, g := range []string{"classic", "untyped", "quorum"} {
		if q := ns + "." + g; queueArgs(t, q) != before[q] {
			t.Errorf("adopted queue %s changed: %s → %s", q, before[q], queueArgs(t, q))
		}
	}
}
