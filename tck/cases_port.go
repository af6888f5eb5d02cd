package tck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The Port cases: declared topics, where a new group starts,
// single-active consumers, QoS classes, tenant scopes, adopting an
// existing topology and the payload limit.
func init() {
	register(20, "TopicRetention", func(c ports.Capabilities) string {
		if !c.Retention {
			return "declares no Retention capability (TopicSpec.Retention is refused by DeclareTopic)"
		}
		return ""
	}, caseTopicRetention)
	register(21, "GroupDeclaredBeforeFirstConsumer", func(c ports.Capabilities) string {
		if !c.DurableGroups {
			return "declares no DurableGroups capability (a group's backlog is not kept before its first consumer)"
		}
		return ""
	}, caseGroupDeclaredAhead)
	register(22, "NewGroupStartsAtLatest", always, caseStartLatest)
	register(23, "NewGroupStartsAtEarliest", func(c ports.Capabilities) string {
		if !c.StartEarliest {
			return "declares no StartEarliest capability (SubscriptionSpec.Start StartEarliest is refused)"
		}
		return ""
	}, caseStartEarliest)
	register(24, "SingleActiveConsumerFailover", func(c ports.Capabilities) string {
		if !c.SingleActive {
			return "declares no SingleActive capability (SubscriptionSpec.SingleActive is refused)"
		}
		return ""
	}, caseSingleActive)
	register(25, "BestEffortQoS", always, caseBestEffort)
	register(26, "TenantIsolation", always, caseTenantIsolation)
	register(27, "AdoptExistingTopology", always, caseAdoptExisting)
	register(28, "OversizedPayloadRefused", func(c ports.Capabilities) string {
		if c.MaxMessageBytes <= 0 {
			return "declares no MaxMessageBytes (no payload limit known)"
		}
		return ""
	}, caseOversized)
	register(29, "TopicRedeclaredWithOtherPropertiesRefused", always, caseRedeclare)
}

// sendTo sends n JSON messages {"n": i} to topic, each changed by mut when
// set, and returns their ids in order.
func (k *kit) sendTo(a ports.Adapter, topic ports.Topic, n int, mut func(*ports.Message)) []string {
	k.t.Helper()
	ids := make([]string, n)
	msgs := make([]ports.Message, n)
	for i := range n {
		m, err := flow.NewMessage(k.ctx, topic, payload{N: i})
		if err != nil {
			k.t.Fatal(err)
		}
		ids[i] = ports.NewID()
		m.Headers.Set(ports.HeaderID, ids[i])
		if mut != nil {
			mut(&m)
		}
		msgs[i] = m
	}
	if err := a.Send(k.ctx, msgs...); err != nil {
		k.t.Fatalf("Send %d messages to %s: %v", n, topic, err)
	}
	return ids
}

// declare declares spec with ports.DeclareTopic and fails the case on error.
func (k *kit) declare(a ports.Adapter, spec ports.TopicSpec) {
	k.t.Helper()
	if err := ports.DeclareTopic(k.ctx, a, spec); err != nil {
		k.t.Fatalf("DeclareTopic %+v: %v", spec, err)
	}
}

// expectOnly collects exactly the messages want on c, each once, then
// watches the quiet window for anything more.
func (c *consumer) expectOnly(want []string, what string) {
	c.k.t.Helper()
	got := ids(c.collect(len(want), what))
	for _, id := range want {
		if got[id] != 1 {
			c.k.t.Fatalf("%s: message %s delivered %d times, want 1 (got %v)", what, id, got[id], got)
		}
	}
	c.quiet(what + ": nothing else may arrive")
}

// quietAll fails if any of cs receives a delivery within one quiet window.
func quietAll(k *kit, what string, cs ...*consumer) {
	k.t.Helper()
	time.Sleep(k.opts.Quiet) // the quiet window: proving nothing arrives
	for i, c := range cs {
		select {
		case r := <-c.got:
			k.t.Fatalf("consumer %d got unexpected delivery %s (topic %s): %s", i+1, r.d.ID, r.d.Topic, what)
		default:
		}
	}
}

// 20. A declared retention drops a message older than it unconsumed, and a
// declared MaxLength (where declared) caps a group's backlog, the oldest
// dropped first.
func caseTopicRetention(k *kit) {
	ret := k.opts.Retention
	k.declare(k.first, ports.TopicSpec{Topic: k.topic, Retention: ret, Groups: []string{k.group}})
	old := k.sendTo(k.first, k.topic, 1, nil)[0]
	time.Sleep(2 * ret) // the subject of this case is expiry after the retention
	fresh := k.sendTo(k.first, k.topic, 1, nil)[0]
	c := k.consume(k.adapter(), k.spec(), nil)
	r := c.next("the message sent within the retention")
	if r.d.ID == old {
		k.t.Fatalf("message %s waited %v unconsumed, above the topic's %v retention, and was still delivered", old, 2*ret, ret)
	}
	if r.d.ID != fresh {
		k.t.Fatalf("got %s, want %s", r.d.ID, fresh)
	}
	c.quiet("the expired message must not be delivered")
	k.t.Logf("retention %v: a message %v old was dropped, a fresh one delivered", ret, 2*ret)

	if !k.caps.MaxLength {
		k.t.Logf("MaxLength part not run: adapter %q declares no MaxLength capability", k.name)
		return
	}
	capped := k.topic + ".len"
	k.declare(k.first, ports.TopicSpec{Topic: capped, MaxLength: 2, Groups: []string{k.group}})
	sent := k.sendTo(k.first, capped, 5, nil)
	sp := k.spec()
	sp.Topic = capped
	c = k.consume(k.adapter(), sp, nil)
	c.expectOnly(sent[3:], "the newest 2 of 5 messages on a topic capped at 2")
}

// 21. Groups declared with the topic keep what is published before their
// first consumer starts, each group its own copy.
func caseGroupDeclaredAhead(k *kit) {
	g1, g2 := k.group+"-a", k.group+"-b"
	k.declare(k.first, ports.TopicSpec{Topic: k.topic, Groups: []string{g1, g2}})
	sent := k.sendTo(k.first, k.topic, 3, nil)
	for _, g := range []string{g1, g2} {
		sp := k.spec()
		sp.Group = g
		c := k.consume(k.adapter(), sp, nil)
		c.expectOnly(sent, "the messages published before group "+g+"'s first consumer")
	}
}

// 22. A new group (default Start) receives only what is published after it
// was created, even though the topic holds older messages for another group.
func caseStartLatest(k *kit) {
	keeper := k.consume(k.first, k.spec(), nil)
	old := k.sendTo(k.first, k.topic, 3, nil)
	keeper.expectOnly(old, "the messages of the existing group")

	sp := k.spec()
	sp.Group = k.group + "-new"
	c := k.consume(k.adapter(), sp, nil)
	fresh := k.sendTo(k.first, k.topic, 1, nil)
	c.expectOnly(fresh, "a new group at StartLatest gets only what is published after it was created")
}

// 23. A new group at StartEarliest receives what the topic retains from
// before it was created; once it exists it resumes where it left off.
func caseStartEarliest(k *kit) {
	keeper := k.consume(k.first, k.spec(), nil)
	old := k.sendTo(k.first, k.topic, 3, nil)
	keeper.expectOnly(old, "the messages of the existing group")

	sp := k.spec()
	sp.Group = k.group + "-new"
	sp.Start = ports.StartEarliest
	c := k.consume(k.adapter(), sp, nil)
	c.expectOnly(old, "a new group at StartEarliest gets the messages published before it existed")
	c.waitStats("their acks", func(s flow.Stats) bool { return s.Acked == int64(len(old)) })
	if !k.caps.DurableGroups {
		k.t.Logf("resume part not run: adapter %q declares no DurableGroups capability", k.name)
		return
	}
	c.stop()
	later := k.sendTo(k.first, k.topic, 1, nil)
	again := k.consume(k.adapter(), sp, nil)
	again.expectOnly(later, "an existing group at StartEarliest resumes where it left off, not at the oldest message")
}

// 24. Of two instances of a single-active group one receives every message;
// when it stops the other takes over.
func caseSingleActive(k *kit) {
	sp := k.spec()
	sp.SingleActive = true
	cs := [2]*consumer{k.consume(k.first, sp, nil), k.consume(k.adapter(), sp, nil)}
	const n = 6
	sent := k.sendTo(k.first, k.topic, n, nil)
	got := map[string]int{}
	per := [2]int{}
	for i := 0; i < n; i++ {
		select {
		case r := <-cs[0].got:
			got[r.d.ID]++
			per[0]++
		case r := <-cs[1].got:
			got[r.d.ID]++
			per[1]++
		case <-time.After(k.opts.Timeout):
			k.t.Fatalf("only %d of %d messages arrived at the single-active group", i, n)
		}
	}
	active := 0
	if per[1] > 0 {
		active = 1
	}
	if per[1-active] != 0 {
		k.t.Fatalf("both instances of a single-active group received messages (%d / %d)", per[0], per[1])
	}
	for _, id := range sent {
		if got[id] != 1 {
			k.t.Fatalf("message %s delivered %d times, want 1", id, got[id])
		}
	}
	cs[active].waitStats("the active instance's acks", func(s flow.Stats) bool { return s.Acked == n })
	cs[1-active].quiet("the standing-by instance must receive nothing while the active one runs")
	cs[active].stop()
	after := k.sendTo(k.first, k.topic, 4, nil)
	cs[1-active].expectOnly(after, "the standing-by instance takes over when the active one stops")
	k.t.Logf("instance %d was active, instance %d took over", active+1, 2-active)
}

// 25. Best-effort messages reach a running best-effort consumer. Where the
// broker has a best-effort class (Capabilities.BestEffort), a failed
// delivery is neither requeued nor dead-lettered by sluice; elsewhere the
// messages travel at-least-once (the documented fallback) and a failed one
// is redelivered and a poison one dead-lettered.
func caseBestEffort(k *kit) {
	const n = 5
	var failID, poisonID string
	ready := make(chan struct{})
	dlq := k.dlq(k.adapter())
	sp := k.spec()
	sp.QoS = ports.BestEffort
	c := k.consume(k.first, sp, func(ctx context.Context, d *ports.Delivery) error {
		<-ready
		switch d.ID {
		case failID:
			return errors.New("tck: a transient failure of a best-effort message")
		case poisonID:
			return ports.Poisonf("tck: a poison best-effort message")
		}
		return nil
	})
	sent := make([]string, n)
	msgs := make([]ports.Message, n)
	for i := range n {
		m, err := flow.NewMessage(k.ctx, k.topic, payload{N: i})
		if err != nil {
			k.t.Fatal(err)
		}
		sent[i] = ports.NewID()
		m.Headers.Set(ports.HeaderID, sent[i])
		m.QoS = ports.BestEffort
		msgs[i] = m
	}
	failID, poisonID = sent[3], sent[4]
	close(ready)
	if err := k.first.Send(k.ctx, msgs...); err != nil {
		k.t.Fatalf("Send %d best-effort messages: %v", n, err)
	}
	got := ids(c.collect(n, "best-effort messages to a running consumer"))
	for _, id := range sent {
		if got[id] < 1 {
			k.t.Fatalf("best-effort message %s was not delivered to the running consumer (got %v)", id, got)
		}
	}
	if k.caps.BestEffort {
		quietAll(k, "a failed best-effort delivery is neither requeued nor dead-lettered by sluice", c, dlq)
		k.t.Logf("native best effort: the failed and the poison delivery were dropped, not requeued or dead-lettered")
		return
	}
	// The fallback: at-least-once.
	for {
		r := c.next("the redelivery of the failed message (best effort falls back to at-least-once)")
		if r.d.ID == failID && r.d.RedeliveryCount > 0 {
			break
		}
	}
	if r := dlq.next("the poison message's dead letter (at-least-once fallback)"); r.d.ID != poisonID {
		k.t.Fatalf("dead-letter topic got %s, want the poison message %s", r.d.ID, poisonID)
	}
	k.t.Logf("adapter %q falls back to at-least-once for best effort: the failed message was redelivered, the poison one dead-lettered", k.name)
}

// 26. Two scopes with the same topic name never see each other's messages,
// and unscoped topics whose flat forms look like a scoped one are distinct.
func caseTenantIsolation(k *kit) {
	suffix := randHex(3)
	ta, tb := "ta"+suffix, "tb"+suffix
	name := string(k.topic)
	topics := []ports.Topic{
		ports.Scope{Tenant: ta, Namespace: "ns"}.Topic(name),
		ports.Scope{Tenant: tb, Namespace: "ns"}.Topic(name), // another tenant, same namespace and name
		ports.Scope{Tenant: ta, Namespace: "other"}.Topic(name),
		ports.Topic(name),                                           // the same name, unscoped
		ports.Topic(ta + ".ns." + name),                             // a "." flat form of the first
		ports.Topic(ta + "-ns-" + name),                             // a "-" flat form
		ports.Topic(ta + "_ns_" + name),                             // a "_" flat form
		ports.Scope{Tenant: ta, Namespace: "ns"}.Topic("x." + name), // a prefixed name in the first scope
	}
	cs := make([]*consumer, len(topics))
	for i, tp := range topics {
		if err := tp.Validate(); err != nil {
			k.t.Fatalf("topic %q: %v", tp, err)
		}
		sp := k.spec()
		sp.Topic = tp
		cs[i] = k.consume(k.first, sp, nil)
	}
	sender := k.adapter() // another process
	sent := make([]string, len(topics))
	for i, tp := range topics {
		sent[i] = k.sendTo(sender, tp, 1, nil)[0]
	}
	for i, c := range cs {
		r := c.next(fmt.Sprintf("the message to %q", topics[i]))
		if r.d.ID != sent[i] {
			k.t.Fatalf("the consumer of %q got message %s, which was sent to another topic (want %s)", topics[i], r.d.ID, sent[i])
		}
		if r.d.Topic != topics[i] {
			k.t.Fatalf("delivery topic %q, want %q", r.d.Topic, topics[i])
		}
	}
	quietAll(k, "a message crossed from one tenant, namespace or flat name to another", cs...)
}

// 27. An adapter configured to adopt a topology created natively (as a
// program written without sluice made it) sends and consumes through the
// existing names and leaves them as they are.
func caseAdoptExisting(k *kit) {
	tp, ok := k.h.(Topology)
	if !ok {
		k.t.Skipf("GAP, not a pass: the harness of adapter %q implements no tck.Topology hook, so adopting an existing topology is untested", k.name)
	}
	ex, err := tp.CreateExisting(k.ctx, k.topic, k.group)
	if err != nil {
		k.t.Fatalf("creating the existing topology natively: %v", err)
	}
	if ex.Adapter == nil || (ex.Unchanged == nil && ex.Unobservable == "") {
		k.t.Fatalf("tck.Topology.CreateExisting returned no Adapter, or neither an Unchanged check nor why it has none (Unobservable)")
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
		defer cancel()
		if err := ex.Adapter.Close(ctx); err != nil {
			k.t.Errorf("closing the adopting adapter: %v", err)
		}
	})
	k.t.Logf("existing topology: %s", ex.Names)
	c := k.consume(ex.Adapter, k.spec(), nil)
	sent := k.sendTo(ex.Adapter, k.topic, 3, nil)
	got := ids(c.collect(len(sent), "messages sent and consumed through the adopted names"))
	for _, id := range sent {
		if got[id] != 1 {
			k.t.Fatalf("message %s delivered %d times through the adopted topology, want 1", id, got[id])
		}
	}
	if ex.Publish != nil {
		body := []byte(`{"n":99,"text":"published natively"}`)
		if err := ex.Publish(k.ctx, body); err != nil {
			k.t.Fatalf("publishing natively to the existing topology: %v", err)
		}
		if r := c.next("the message published natively to the existing names"); !bytes.Equal(r.d.Payload, body) {
			k.t.Fatalf("natively published payload arrived as %q, want %q", r.d.Payload, body)
		}
	} else {
		k.t.Logf("harness gives no native Publish: only sluice-to-sluice traffic over the adopted names was checked")
	}
	c.waitStats("the acks", func(s flow.Stats) bool { return s.Acked >= int64(len(sent)) })
	if ex.Unchanged == nil {
		k.t.Logf("SKIP of the check that the existing topology was left unchanged (not a pass): %s", ex.Unobservable)
		return
	}
	if err := ex.Unchanged(k.ctx); err != nil {
		k.t.Fatalf("the existing topology was changed: %v", err)
	}
}

// envelopeMargin is what the oversize case leaves for the envelope when an
// adapter's limit counts it.
const envelopeMargin = 4096

// 28. A message above Capabilities.MaxMessageBytes fails Send with a
// *ports.SizeError (ErrInvalid-class, never ErrUnconfirmed) at once; one
// at the limit (less the envelope where the limit counts it) is delivered.
//
// The refused payload is limit+1 bytes allocated and never written, so its
// pages stay untouched for an adapter that checks the size before touching
// the payload. The accepted payload is bounded by Options.MaxPayload: a
// larger limit is exercised with a payload of that bound, as logged.
func caseOversized(k *kit) {
	limit := k.caps.MaxMessageBytes
	c := k.consume(k.first, k.spec(), nil)
	big := ports.Message{Topic: k.topic, Payload: make([]byte, limit+1)}
	start := time.Now()
	err := k.first.Send(k.ctx, big)
	took := time.Since(start)
	big.Payload = nil
	var se *ports.SizeError
	switch {
	case err == nil:
		k.t.Fatalf("Send of %d bytes, above the declared limit of %d, returned nil", limit+1, limit)
	case errors.Is(err, ports.ErrUnconfirmed):
		k.t.Fatalf("Send of an oversized message returned %v: ErrUnconfirmed invites a retry that can never succeed", err)
	case !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid):
		k.t.Fatalf("Send of an oversized message returned %v, want a *ports.SizeError (ErrInvalid)", err)
	case se.Limit != limit:
		k.t.Fatalf("SizeError.Limit %d, want the declared MaxMessageBytes %d", se.Limit, limit)
	}
	if bound := min(k.opts.Timeout, 5*time.Second); took > bound {
		k.t.Fatalf("refusing an oversized message took %v (more than %v): it must fail before touching the broker", took, bound)
	}
	fit := limit
	if k.caps.SizeCountsEnvelope {
		fit -= envelopeMargin
	}
	if fit > k.opts.MaxPayload {
		k.t.Logf("limit %d bytes is above the kit's allocation bound Options.MaxPayload %d: the accepted message has %d bytes", limit, k.opts.MaxPayload, k.opts.MaxPayload)
		fit = k.opts.MaxPayload
	}
	body := make([]byte, fit)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	ok := k.sendTo(k.first, k.topic, 1, func(m *ports.Message) { m.Payload = body })[0]
	r := c.next(fmt.Sprintf("the message of %d bytes (limit %d)", fit, limit))
	if r.d.ID != ok {
		k.t.Fatalf("got %s, want the accepted message %s (the refused one must not be stored)", r.d.ID, ok)
	}
	if !bytes.Equal(r.d.Payload, body) {
		k.t.Fatalf("the %d-byte payload arrived as %d bytes, or changed", fit, len(r.d.Payload))
	}
	c.quiet("the refused oversized message must not be delivered")
	k.t.Logf("limit %d bytes (envelope counted: %v): %d+1 refused in %v, %d delivered", limit, k.caps.SizeCountsEnvelope, limit, took.Round(time.Microsecond), fit)
}

// 29. Redeclaring a topic with other properties fails with a
// *ports.RedeclareError naming the difference and leaves the topic as it is;
// the same declaration again is a no-op. An adapter passes only as a
// ports.TopicDeclarer: one whose broker cannot store topic properties
// records them with kit.Declared. The check is within one adapter (one
// process); across processes it holds only where the broker stores them.
func caseRedeclare(k *kit) {
	spec := ports.TopicSpec{Topic: k.topic}
	if k.caps.DurableGroups {
		spec.Groups = []string{k.group}
	}
	if k.caps.Retention {
		spec.Retention = time.Hour
	}
	k.declare(k.first, spec)
	k.declare(k.first, spec) // idempotent
	other := spec
	other.NoDeadLetter = true
	if k.caps.Retention {
		other.Retention = 2 * time.Hour
	}
	err := ports.DeclareTopic(k.ctx, k.first, other)
	var re *ports.RedeclareError
	if !errors.As(err, &re) || !errors.Is(err, ports.ErrInvalid) {
		k.t.Fatalf("redeclaring %q with other properties returned %v, want a *ports.RedeclareError", k.topic, err)
	}
	if !strings.Contains(strings.Join(re.Diffs, "; "), "NoDeadLetter") {
		k.t.Fatalf("RedeclareError %v does not name the NoDeadLetter difference", re)
	}
	k.declare(k.first, spec) // the topic is still as first declared
	c := k.consume(k.adapter(), k.spec(), nil)
	sent := k.sendTo(k.first, k.topic, 1, nil)
	c.expectOnly(sent, "a message on the topic left as it was")
	k.t.Logf("refused: %v", re)
}
