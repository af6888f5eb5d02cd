package tck

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(34, "ForeignProducer", always, caseForeignProducer)
}

// foreignSeen is what the kit's handler saw of one foreign message.
type foreignSeen struct {
	attempts []*ports.Delivery
}

// 32. A message published by a producer without sluice (the broker's own
// client, the body only) is delivered with its body intact and with the
// identity the rule of ports.IDSource gives it: the same on a redelivery,
// and the same on its dead-letter copy, whose body is the original's,
// byte for byte.
//
// Two messages are published: one with a producer id in the broker's own
// message-id field (where it has one) and one without. Each is failed once
// (requeued), then refused as poison (dead-lettered).
func caseForeignProducer(k *kit) {
	fp, ok := k.h.(ForeignProducer)
	if !ok {
		k.t.Skipf("SKIP (gap): harness %T has no ForeignProducer hook: messages from producers without sluice are not exercised", k.h)
	}
	dead := k.dlq(k.first)
	var mu sync.Mutex
	seen := map[string]*foreignSeen{}
	c := k.consume(k.first, k.spec(), func(_ context.Context, d *ports.Delivery) error {
		mu.Lock()
		s := seen[string(d.Payload)]
		if s == nil {
			s = &foreignSeen{}
			seen[string(d.Payload)] = s
		}
		s.attempts = append(s.attempts, d)
		n := len(s.attempts)
		mu.Unlock()
		if n == 1 {
			return errors.New("first attempt of a foreign message fails (the kit requeues it once)")
		}
		return ports.Poisonf("foreign message refused by the kit")
	})
	msgs := []ForeignMessage{
		{Body: []byte(`{"id":"r-1","total":"11"}`), ID: "foreign-" + randHex(4)},
		{Body: []byte(`{"id":"r-2","total":"12"}`)},
	}
	want := make([]ports.IDSource, len(msgs))
	for i, m := range msgs {
		src, err := fp.PublishForeign(k.ctx, k.topic, m)
		if err != nil {
			k.t.Fatalf("publishing foreign message %s with the broker's own client: %v", m.Body, err)
		}
		want[i] = src
	}
	// Two attempts of each, then one dead-letter copy of each.
	c.collect(2*len(msgs), "two attempts of each foreign message")
	deadByBody := map[string]*ports.Delivery{}
	for _, r := range dead.collect(len(msgs), "the dead-letter copies of the foreign messages") {
		deadByBody[string(r.d.Payload)] = r.d
	}
	mu.Lock()
	defer mu.Unlock()
	for i, m := range msgs {
		s := seen[string(m.Body)]
		if s == nil || len(s.attempts) < 2 {
			k.t.Errorf("foreign message %s: body not delivered intact twice (bodies seen: %q)", m.Body, keys(seen))
			continue
		}
		first, second := s.attempts[0], s.attempts[1]
		k.t.Logf("foreign message %s: ID %q (%s), redelivered as %q (%s)", m.Body, first.ID, first.IDSource, second.ID, second.IDSource)
		checkForeignIdentity(k, m, want[i], first)
		if second.ID != first.ID || second.IDSource != first.IDSource {
			k.t.Errorf("foreign message %s: ID %q (%s) on the first delivery, %q (%s) on the redelivery: an identity must be stable across redeliveries", m.Body, first.ID, first.IDSource, second.ID, second.IDSource)
		}
		if second.RedeliveryCount < 1 {
			k.t.Errorf("foreign message %s: redelivery count %d on the second delivery, want ≥ 1", m.Body, second.RedeliveryCount)
		}
		if i > 0 && first.ID != "" && first.ID == seen[string(msgs[0].Body)].attempts[0].ID {
			k.t.Errorf("foreign messages %s and %s share the ID %q: an identity must be unique", msgs[0].Body, m.Body, first.ID)
		}
		dl := deadByBody[string(m.Body)]
		if dl == nil {
			k.t.Errorf("foreign message %s: no dead-letter copy with the original body byte for byte (dead-letter bodies: %q)", m.Body, keys(deadByBody))
			continue
		}
		if dl.ID != first.ID || dl.IDSource != first.IDSource {
			k.t.Errorf("foreign message %s: dead-letter copy has ID %q (%s), want the original's %q (%s)", m.Body, dl.ID, dl.IDSource, first.ID, first.IDSource)
		}
		if dl.Headers.Get(ports.HeaderDeadLetterReason) == "" || dl.Headers.Get(ports.HeaderDeadLetterTopic) != string(k.topic) {
			k.t.Errorf("foreign message %s: dead-letter copy lacks its reason or topic header: %v", m.Body, dl.Headers)
		}
	}
}

// checkForeignIdentity checks d's identity against what the harness says
// the broker gives m.
func checkForeignIdentity(k *kit, m ForeignMessage, want ports.IDSource, d *ports.Delivery) {
	k.t.Helper()
	if d.Err != nil {
		k.t.Errorf("foreign message %s: delivered with Err %v (a plain producer's message is not poison)", m.Body, d.Err)
	}
	if d.RedeliveryCount != 0 {
		k.t.Errorf("foreign message %s: redelivery count %d on the first delivery", m.Body, d.RedeliveryCount)
	}
	if (d.ID == "") != (d.IDSource == ports.IDNone) || d.HasIdentity() != (d.ID != "") {
		k.t.Errorf("foreign message %s: ID %q with IDSource %s: IDSource must be none exactly when ID is empty", m.Body, d.ID, d.IDSource)
	}
	if d.IDSource != want {
		k.t.Errorf("foreign message %s: IDSource %s (ID %q), want %s for this broker", m.Body, d.IDSource, d.ID, want)
	}
	if want == ports.IDProducer && d.ID != m.ID {
		k.t.Errorf("foreign message %s: ID %q, want the producer's %q", m.Body, d.ID, m.ID)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
