package amqp_test

import (
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/ports"
)

// TestAdoptedQueueLogsItsActualType: the adapter's capabilities are those
// of its queue type (quorum: an exact redelivery count), but an adopted
// queue is whatever it was declared as. Subscribe says so: an adopted
// classic queue (declared with the type, or without, the default) is
// logged at Info with its type and a redelivery count that is not exact;
// an adopted quorum queue and the adapter's own queues at Debug with
// theirs. Nothing about the adopted queues changes.
func TestAdoptedQueueLogsItsActualType(t *testing.T) {
	ns := namespace("adopt")
	ch := rawChannel(t)
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
	logs := &opentest.LogBuffer{}
	a := newAdapter(t, amqp.Options{Namespace: ns, Logger: logs.Logger(), Existing: &amqp.Existing{Groups: groups}})
	if !a.Capabilities().ExactRedeliveryCount {
		t.Fatal("a quorum adapter must declare an exact redelivery count")
	}
	for g := range groups {
		_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "legacy", Group: g.Group})
	}
	_ = subscribe(t, a, ports.SubscriptionSpec{Topic: "legacy", Group: "own"})
	for q, want := range map[string]map[string]any{
		ns + ".classic":       {"level": "INFO", "adopted": true, "queue_type": "classic", "exact_redelivery_count": false},
		ns + ".untyped":       {"level": "INFO", "adopted": true, "queue_type": "classic", "exact_redelivery_count": false},
		ns + ".quorum":        {"level": "DEBUG", "adopted": true, "queue_type": "quorum", "exact_redelivery_count": true},
		ns + "/legacy/lb/own": {"level": "DEBUG", "adopted": false, "queue_type": "quorum", "exact_redelivery_count": true},
	} {
		var line map[string]any
		for _, r := range logs.Records(t) {
			if r["msg"] == "sluice amqp: subscribed" && r["queue"] == q {
				line = r
			}
		}
		for k, v := range want {
			if line[k] != v {
				t.Errorf("%s: %s = %v in %v, want %v", q, k, line[k], line, v)
			}
		}
	}
	// Learning the type changed nothing: the classic queue still has its
	// arguments (a declaration with them is a no-op).
	if _, err := ch.QueueDeclare(ns+".classic", true, false, false, false, queues[ns+".classic"]); err != nil {
		t.Fatalf("the adopted classic queue changed: %v", err)
	}
}
