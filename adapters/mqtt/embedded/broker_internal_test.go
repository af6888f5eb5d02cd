package embedded

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// A QoS 1 publish is routed, then acknowledged; the subscriber gets it with
// every property as published (user properties in order, a repeated key
// kept) and what is left of its expiry interval.
func TestQoS1RoundTripWithProperties(t *testing.T) {
	b := start(t, Options{})
	sub, ca := connected(t, b, connectOpts{id: "sub", clean: true})
	if p := ca.Properties; p.ReceiveMaximum == nil || *p.ReceiveMaximum != 1024 || p.MaximumQOS == nil || *p.MaximumQOS != 1 ||
		p.RetainAvailable == nil || *p.RetainAvailable != 0 || p.WildcardSubAvailable == nil || *p.WildcardSubAvailable != 1 ||
		p.SharedSubAvailable == nil || *p.SharedSubAvailable != 1 || p.SubIDAvailable == nil || *p.SubIDAvailable != 0 ||
		p.TopicAliasMaximum == nil || *p.TopicAliasMaximum != 0 || ca.SessionPresent {
		t.Fatalf("CONNACK %v", ca)
	}
	sub.sub("orders/+")
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	props := &packets.Properties{PayloadFormat: ptr(byte(1)), MessageExpiry: ptr(uint32(60)), ContentType: "application/json",
		ResponseTopic: "replies/1", CorrelationData: []byte{1, 2, 3}, User: userProps("a", "1", "b", "2", "a", "3")}
	if r := pub.publish("orders/paid", `{"n":1}`, props); r != 0 {
		t.Fatalf("PUBACK reason 0x%02X, want 0", r)
	}
	p := sub.expectPublish(`{"n":1}`)
	got := p.Properties
	switch {
	case p.Topic != "orders/paid" || p.QoS != 1 || p.Duplicate || p.Retain || p.PacketID == 0:
		t.Fatalf("PUBLISH topic %q QoS %d DUP %v retain %v id %d", p.Topic, p.QoS, p.Duplicate, p.Retain, p.PacketID)
	case got.PayloadFormat == nil || *got.PayloadFormat != 1 || got.ContentType != "application/json" || got.ResponseTopic != "replies/1" ||
		!bytes.Equal(got.CorrelationData, []byte{1, 2, 3}) || !slices.Equal(got.User, props.User):
		t.Fatalf("properties not passed through: %v", got)
	case got.MessageExpiry == nil || *got.MessageExpiry < 59 || *got.MessageExpiry > 60:
		t.Fatalf("message expiry %v, want what is left of 60 s", got.MessageExpiry)
	}
	sub.puback(p.PacketID)
	waitFor(t, "the PUBACK is applied", func() bool { return b.state("sub").inflight == 0 })

	// No subscriber: 0x10, still acknowledged.
	if r := pub.publish("nobody/listens", "x", nil); r != 0x10 {
		t.Fatalf("PUBACK reason 0x%02X with no subscriber, want 0x10", r)
	}
	// QoS 0 both ways, and a QoS 1 message to a QoS 0 subscription.
	if r := sub.subscribe(packets.SubOptions{Topic: "ticks", QoS: 0}); r[0] != 0 {
		t.Fatalf("SUBACK %v", r)
	}
	pub.send(&packets.Publish{Topic: "ticks", Payload: []byte("q0"), Properties: &packets.Properties{}})
	if p := sub.expectPublish("q0"); p.QoS != 0 || p.Properties.MessageExpiry != nil {
		t.Fatalf("QoS 0 message arrived at QoS %d, expiry %v", p.QoS, p.Properties.MessageExpiry)
	}
	pub.mustPublish("ticks", "q1")
	if p := sub.expectPublish("q1"); p.QoS != 0 {
		t.Fatalf("QoS 1 message on a QoS 0 subscription arrived at QoS %d", p.QoS)
	}
}

// Topic filters: '+' and '#', '$' topics hidden from leading wildcards,
// one copy per session at the highest QoS of its overlapping
// subscriptions, No Local.
func TestFiltersOverlapAndNoLocal(t *testing.T) {
	b := start(t, Options{})
	c, _ := connected(t, b, connectOpts{id: "c", clean: true})
	if r := c.subscribe(packets.SubOptions{Topic: "a/#", QoS: 0}, packets.SubOptions{Topic: "a/+/c", QoS: 1}, packets.SubOptions{Topic: "+/b/#", QoS: 2}); !bytes.Equal(r, []byte{0, 1, 1}) {
		t.Fatalf("SUBACK %v, want [0 1 1] (QoS 2 granted as 1)", r)
	}
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	for _, topic := range []string{"a/b/c", "a", "a/x/y", "z/b"} {
		pub.mustPublish(topic, topic)
	}
	// One copy of each, in order: the QoS is the highest matching one.
	for _, want := range []struct {
		payload string
		qos     byte
	}{{"a/b/c", 1}, {"a", 0}, {"a/x/y", 0}, {"z/b", 1}} {
		p := c.expectPublish(want.payload)
		if p.QoS != want.qos {
			t.Fatalf("%s arrived at QoS %d, want %d", want.payload, p.QoS, want.qos)
		}
		if p.QoS == 1 {
			c.puback(p.PacketID)
		}
	}
	if r := pub.publish("$SYS/b", "x", nil); r != 0x10 {
		t.Fatalf("a '$' topic matched a leading wildcard (PUBACK 0x%02X, want 0x10)", r)
	}
	c.sub("$SYS/#")
	pub.mustPublish("$SYS/b", "sys")
	c.puback(c.expectPublish("sys").PacketID)

	// No Local: the only matching subscription is the publisher's own.
	if r := c.subscribe(packets.SubOptions{Topic: "echo", QoS: 1, NoLocal: true}); r[0] != 1 {
		t.Fatalf("SUBACK %v", r)
	}
	if r := c.publish("echo", "mine", nil); r != 0x10 {
		t.Fatalf("own publish with No Local: PUBACK 0x%02X, want 0x10 (not routed back)", r)
	}
	pub.mustPublish("echo", "theirs")
	c.puback(c.expectPublish("theirs").PacketID)

	// Invalid filters, and UNSUBSCRIBE's codes.
	for _, f := range []string{"a/#/b", "a+", "", "$share/g", "$share//x", "$share/g+/x", "#/"} {
		if r := c.subscribe(packets.SubOptions{Topic: f, QoS: 1}); r[0] != codeFilterInvalid {
			t.Errorf("SUBSCRIBE %q: reason 0x%02X, want 0x8F", f, r[0])
		}
	}
	c.id++
	c.send(&packets.Unsubscribe{PacketID: c.id, Topics: []string{"a/#", "never", "a/#/b"}, Properties: &packets.Properties{}})
	if ua, ok := c.read().Content.(*packets.Unsuback); !ok || !bytes.Equal(ua.Reasons, []byte{0, 0x11, 0x8F}) {
		t.Fatalf("UNSUBACK %v, want [0 0x11 0x8F]", ua)
	}
}

// A shared subscription gives each message to one member, round-robin
// among the connected members with room, never to a member at its
// Receive Maximum while another has room.
func TestSharedSubscriptionRoundRobin(t *testing.T) {
	b := start(t, Options{})
	var members []*client
	for _, id := range []string{"m0", "m1", "m2"} {
		c, _ := connected(t, b, connectOpts{id: id, clean: true})
		c.sub("$share/g/jobs")
		members = append(members, c)
	}
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	for i := range 9 {
		pub.mustPublish("jobs", string(rune('a'+i)))
	}
	for i := range 9 {
		p := members[i%3].expectPublish(string(rune('a' + i)))
		members[i%3].puback(p.PacketID)
	}

	// A member with Receive Maximum 1 holding one message gets no more
	// while the others have room.
	slow, _ := connected(t, b, connectOpts{id: "slow", clean: true, receiveMax: 1})
	slow.sub("$share/h/work")
	fast, _ := connected(t, b, connectOpts{id: "fast", clean: true})
	fast.sub("$share/h/work")
	pub.mustPublish("work", "first") // slow's turn: it joined first
	held := slow.expectPublish("first")
	for i := range 4 {
		pub.mustPublish("work", string(rune('w'+i)))
	}
	for i := range 4 {
		fast.puback(fast.expectPublish(string(rune('w' + i))).PacketID)
	}
	if s := b.state("slow"); s.queued != 0 || s.outstanding != 1 {
		t.Fatalf("slow member holds %+v, want only its one message in flight", s)
	}
	slow.puback(held.PacketID)
}

// When a member's session ends — it expires, the client starts clean, or
// disconnects with expiry 0 — or the member unsubscribes, what it held of
// the group, queued and unacknowledged, goes to the remaining members in
// order; nothing is lost while a member remains.
func TestSharedHandOverWhenAMemberEnds(t *testing.T) {
	b := start(t, Options{})
	ends := sessionEnds(b)
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})

	t.Run("expiry", func(t *testing.T) {
		a, _ := connected(t, b, connectOpts{id: "xa", clean: true, expiry: 2})
		a.sub("$share/x/t1")
		k, _ := connected(t, b, connectOpts{id: "xk", clean: true, expiry: 3600})
		k.sub("$share/x/t1")
		pub.mustPublish("t1", "1") // xa's turn
		a.expectPublish("1")       // in flight, never acknowledged
		_ = a.nc.Close()
		_ = k.nc.Close()
		waitFor(t, "both members disconnected", func() bool { return !b.state("xa").connected && !b.state("xk").connected })
		for _, p := range []string{"2", "3", "4", "5"} {
			pub.mustPublish("t1", p) // parked round-robin: 2 on one, 2 on the other
		}
		if a, k := b.state("xa"), b.state("xk"); a.queued != 2 || k.queued != 2 {
			t.Fatalf("backlog parked %d/%d, want 2 on each disconnected member", a.queued, k.queued)
		}
		awaitEnd(t, ends, "xa")
		k2, ca := connected(t, b, connectOpts{id: "xk", expiry: 3600})
		if !ca.SessionPresent {
			t.Fatal("xk's session was not kept")
		}
		got := map[string]bool{}
		for range 5 {
			p := k2.publishPacket()
			got[string(p.Payload)] = true
			k2.puback(p.PacketID)
		}
		if len(got) != 5 {
			t.Fatalf("the remaining member got %v, want all 5", got)
		}
	})
	t.Run("clean-start", func(t *testing.T) {
		a, _ := connected(t, b, connectOpts{id: "ya", clean: true, expiry: 3600})
		a.sub("$share/y/t2")
		k, _ := connected(t, b, connectOpts{id: "yk", clean: true, expiry: 3600})
		k.sub("$share/y/t2")
		pub.mustPublish("t2", "1")
		a.expectPublish("1")
		_ = a.nc.Close()
		waitFor(t, "ya disconnected", func() bool { return !b.state("ya").connected })
		pub.mustPublish("t2", "2") // yk: the only connected member
		k.puback(k.expectPublish("2").PacketID)
		connected(t, b, connectOpts{id: "ya", clean: true}) // ends ya's session
		k.puback(k.expectPublish("1").PacketID)
	})
	t.Run("disconnect-expiry-0", func(t *testing.T) {
		a, _ := connected(t, b, connectOpts{id: "za", clean: true, expiry: 3600})
		a.sub("$share/z/t3")
		k, _ := connected(t, b, connectOpts{id: "zk", clean: true})
		k.sub("$share/z/t3")
		pub.mustPublish("t3", "1")
		a.expectPublish("1")
		a.send(&packets.Disconnect{Properties: &packets.Properties{SessionExpiryInterval: ptr(uint32(0))}})
		awaitEnd(t, ends, "za")
		k.puback(k.expectPublish("1").PacketID)
	})
	t.Run("unsubscribe", func(t *testing.T) {
		a, _ := connected(t, b, connectOpts{id: "ua", clean: true})
		a.sub("$share/u/t4", "other")
		k, _ := connected(t, b, connectOpts{id: "uk", clean: true, receiveMax: 1})
		k.sub("$share/u/t4")
		pub.mustPublish("t4", "1") // ua
		orphan := a.expectPublish("1")
		pub.mustPublish("t4", "2") // uk
		held := k.expectPublish("2")
		pub.mustPublish("t4", "3") // ua
		orphan3 := a.expectPublish("3")
		a.id++
		a.send(&packets.Unsubscribe{PacketID: a.id, Topics: []string{"$share/u/t4"}, Properties: &packets.Properties{}})
		if ua, ok := a.read().Content.(*packets.Unsuback); !ok || ua.Reasons[0] != 0 {
			t.Fatalf("UNSUBACK %v", ua)
		}
		// uk gets 1 and 3, in order, after the one it holds.
		k.puback(held.PacketID)
		k.puback(k.expectPublish("1").PacketID)
		k.puback(k.expectPublish("3").PacketID)
		// ua's packet ids stay taken until it acknowledges: a new message
		// to it gets another id, and the late PUBACK does not touch it.
		pub.mustPublish("other", "new")
		p := a.expectPublish("new")
		if p.PacketID == orphan.PacketID {
			t.Fatalf("packet id %d of a handed-over delivery reused before its PUBACK", p.PacketID)
		}
		a.puback(orphan.PacketID)
		a.puback(orphan3.PacketID)
		waitFor(t, "the orphans' PUBACKs are applied", func() bool { return b.state("ua").outstanding == 1 })
		if s := b.state("ua"); s.inflight != 1 {
			t.Fatalf("ua has %d in flight after the orphans' PUBACKs, want the new message only", s.inflight)
		}
	})
}

// A resumed session gets what was in flight again first — in order, DUP,
// with the same packet ids — then what was queued, in order.
func TestResumeResendsInFlightInOrder(t *testing.T) {
	b := start(t, Options{})
	sub, _ := connected(t, b, connectOpts{id: "r", clean: true, expiry: 60, receiveMax: 3})
	sub.sub("jobs")
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	for _, p := range []string{"1", "2", "3", "4", "5"} {
		pub.mustPublish("jobs", p)
	}
	var ids []uint16
	for _, want := range []string{"1", "2", "3"} {
		ids = append(ids, sub.expectPublish(want).PacketID)
	}
	if s := b.state("r"); s.outstanding != 3 || s.queued != 2 {
		t.Fatalf("session %+v, want 3 in flight and 2 queued (Receive Maximum 3)", s)
	}
	_ = sub.nc.Close() // abnormal: no DISCONNECT
	waitFor(t, "r disconnected", func() bool { return !b.state("r").connected })
	pub.mustPublish("jobs", "6")
	again, ca := connected(t, b, connectOpts{id: "r", expiry: 60, receiveMax: 10})
	if !ca.SessionPresent {
		t.Fatal("session not present on resume")
	}
	for i, want := range []string{"1", "2", "3"} {
		p := again.expectPublish(want)
		if !p.Duplicate || p.PacketID != ids[i] {
			t.Fatalf("resent %s with DUP %v id %d, want DUP and id %d", want, p.Duplicate, p.PacketID, ids[i])
		}
	}
	for _, want := range []string{"4", "5", "6"} {
		if p := again.expectPublish(want); p.Duplicate {
			t.Fatalf("queued %s sent with DUP", want)
		}
	}
}

// At most the client's Receive Maximum unacknowledged QoS 1 messages are
// in flight, with distinct packet ids; the rest wait and go out as
// PUBACKs arrive. A client exceeding the broker's own gets DISCONNECT
// 0x93.
func TestReceiveMaximumFlowControl(t *testing.T) {
	b := start(t, Options{ReceiveMaximum: 2})
	sub, _ := connected(t, b, connectOpts{id: "s", clean: true, receiveMax: 2})
	sub.sub("t")
	pub, ca := connected(t, b, connectOpts{id: "p", clean: true})
	if *ca.Properties.ReceiveMaximum != 2 {
		t.Fatalf("CONNACK Receive Maximum %d, want Options.ReceiveMaximum 2", *ca.Properties.ReceiveMaximum)
	}
	for _, p := range []string{"1", "2", "3", "4", "5"} {
		pub.mustPublish("t", p)
	}
	p1, p2 := sub.expectPublish("1"), sub.expectPublish("2")
	if p1.PacketID == p2.PacketID {
		t.Fatalf("two messages in flight with packet id %d", p1.PacketID)
	}
	if s := b.state("s"); s.outstanding != 2 || s.queued != 3 {
		t.Fatalf("session %+v, want 2 in flight and 3 waiting", s)
	}
	sub.puback(p2.PacketID)
	p3 := sub.expectPublish("3")
	if p3.PacketID == p1.PacketID {
		t.Fatalf("packet id %d reused while in flight", p1.PacketID)
	}
	sub.puback(p1.PacketID)
	sub.puback(p3.PacketID)
	sub.puback(sub.expectPublish("4").PacketID)
	sub.puback(sub.expectPublish("5").PacketID)

	// Three unacknowledged publishes, the broker's Receive Maximum being
	// 2: its writer is held so that no PUBACK goes out meanwhile.
	hold := make(chan struct{})
	b.mu.Lock()
	b.testWriterRound = func(c *conn) {
		if c.id == "p" {
			<-hold
		}
	}
	b.mu.Unlock()
	for i := range 3 {
		pub.send(&packets.Publish{Topic: "t", Payload: []byte("over"), QoS: 1, PacketID: uint16(100 + i), Properties: &packets.Properties{}})
	}
	waitFor(t, "the third unacknowledged publish ends the connection", func() bool {
		return !b.state("p").exists // clean, expiry 0: the session ends with it
	})
	close(hold)
	pub.expectDisconnect(codeReceiveMaxExceeded)
}

// A second connection with a client id takes the session over: the first
// gets DISCONNECT 0x8E and is closed; its will is published.
func TestSessionTakeover(t *testing.T) {
	b := start(t, Options{})
	watcher, _ := connected(t, b, connectOpts{id: "w", clean: true})
	watcher.sub("wills/#")
	first, _ := connected(t, b, connectOpts{id: "dup", clean: true, expiry: 60, will: &packets.Publish{Topic: "wills/dup", Payload: []byte("gone"), QoS: 1}})
	first.sub("x")
	second, ca := connected(t, b, connectOpts{id: "dup", expiry: 60})
	if !ca.SessionPresent {
		t.Fatal("the taken-over session was not resumed")
	}
	dp := first.expectDisconnect(codeSessionTakenOver)
	if dp.Properties.ReasonString == "" {
		t.Error("no reason string with the takeover")
	}
	watcher.puback(watcher.expectPublish("gone").PacketID)
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	pub.mustPublish("x", "kept")
	second.expectPublish("kept") // the subscription came with the session
}

// A connection taken over before its CONNACK was written still gets the
// CONNACK first, then DISCONNECT 0x8E [MQTT-3.14.0-1].
func TestTakeoverBeforeConnackWritten(t *testing.T) {
	b := start(t, Options{})
	hold := make(chan struct{})
	var firstRemote atomic.Value
	b.mu.Lock()
	b.testWriterRound = func(c *conn) {
		if c.id == "twice" && c.remote == firstRemote.Load() {
			<-hold
		}
	}
	b.mu.Unlock()
	first := dial(t, b)
	firstRemote.Store(first.nc.LocalAddr().String())
	first.send((connectOpts{id: "twice", clean: true, expiry: 60}).packet())
	waitFor(t, "the first connection attached", func() bool { return b.state("twice").connected })
	connected(t, b, connectOpts{id: "twice", expiry: 60})
	close(hold)
	if ca, ok := first.read().Content.(*packets.Connack); !ok || ca.ReasonCode != 0 {
		t.Fatalf("first packet %v, want the CONNACK", ca)
	}
	first.expectDisconnect(codeSessionTakenOver)
}

// A disconnected session expires exactly its interval after the
// disconnect (a timer, not a sweep); one resumed before is kept; a
// DISCONNECT can change the interval.
func TestSessionExpiryIsExact(t *testing.T) {
	b := start(t, Options{})
	ends := sessionEnds(b)
	for _, tc := range []struct {
		name    string
		connect uint32
		disc    *uint32 // DISCONNECT's session expiry; nil: the connection is cut
		want    time.Duration
	}{
		{name: "connect-1s", connect: 1, want: time.Second},
		{name: "disconnect-sets-1s", connect: 3600, disc: ptr(uint32(1)), want: time.Second},
		{name: "zero", connect: 0, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := connected(t, b, connectOpts{id: tc.name, clean: true, expiry: tc.connect})
			c.sub("t")
			var at time.Time
			if tc.disc != nil {
				c.send(&packets.Disconnect{Properties: &packets.Properties{SessionExpiryInterval: tc.disc}})
				at = time.Now()
			} else {
				at = time.Now()
				_ = c.nc.Close()
			}
			end := awaitEnd(t, ends, tc.name)
			if d := end.Sub(at); d < tc.want || d > tc.want+time.Second {
				t.Fatalf("session ended %v after the disconnect, want %v (within a second's scheduling)", d, tc.want)
			}
			t.Logf("ended %v after the disconnect", end.Sub(at))
		})
	}
	t.Run("resumed-before-expiry", func(t *testing.T) {
		c, _ := connected(t, b, connectOpts{id: "kept", clean: true, expiry: 1})
		c.sub("t")
		_ = c.nc.Close()
		waitFor(t, "kept disconnected", func() bool { return !b.state("kept").connected })
		again, ca := connected(t, b, connectOpts{id: "kept", expiry: 1})
		if !ca.SessionPresent {
			t.Fatal("session not present")
		}
		// The first disconnect's timer is disarmed: the session ends a
		// whole interval after the second.
		again.send(&packets.Disconnect{Properties: &packets.Properties{}})
		at := time.Now()
		end := awaitEnd(t, ends, "kept")
		if d := end.Sub(at); d < time.Second {
			t.Fatalf("resumed session ended %v after its second disconnect, before its 1s expiry", d)
		}
	})
}

// An expired message is never sent — queued, or in flight and resent —
// and a forwarded one carries what is left of its interval.
func TestMessageExpiry(t *testing.T) {
	b := start(t, Options{})
	clock := useFakeClock(b)
	sub, _ := connected(t, b, connectOpts{id: "s", clean: true, expiry: 3600, receiveMax: 1})
	sub.sub("t")
	pub, _ := connected(t, b, connectOpts{id: "p", clean: true})
	exp := func(s uint32) *packets.Properties { return &packets.Properties{MessageExpiry: &s} }
	for _, m := range []struct {
		payload string
		expiry  uint32
	}{{"inflight-short", 2}, {"short", 2}, {"long", 60}} {
		if r := pub.publish("t", m.payload, exp(m.expiry)); r != 0 {
			t.Fatalf("PUBACK 0x%02X", r)
		}
	}
	pub.mustPublish("t", "none")
	sub.expectPublish("inflight-short") // in flight, never acknowledged
	_ = sub.nc.Close()
	waitFor(t, "s disconnected", func() bool { return !b.state("s").connected })
	clock.Advance(2500 * time.Millisecond)
	again, _ := connected(t, b, connectOpts{id: "s", expiry: 3600})
	p := again.expectPublish("long")
	if e := p.Properties.MessageExpiry; e == nil || *e != 58 {
		t.Fatalf("forwarded expiry %v after 2.5s of 60s, want 58 (rounded up)", e)
	}
	again.puback(p.PacketID)
	if p := again.expectPublish("none"); p.Properties.MessageExpiry != nil {
		t.Fatalf("a message without expiry got %d", *p.Properties.MessageExpiry)
	}
}

// Options.Users: any other user name or password is refused with CONNACK
// 0x86 and the connection closed.
func TestAuthentication(t *testing.T) {
	b := start(t, Options{Users: map[string]string{"svc": "s3cret"}})
	for _, o := range []connectOpts{{id: "a", user: "svc", pass: "wrong"}, {id: "b", user: "svc"}, {id: "c"}, {id: "d", user: "other", pass: "s3cret"}} {
		c := dial(t, b)
		if ca := c.connect(o); ca.ReasonCode != codeBadCredentials {
			t.Fatalf("CONNECT %+v: CONNACK 0x%02X, want 0x86", o, ca.ReasonCode)
		}
		if dp := c.disconnected(); dp != nil {
			t.Fatalf("a DISCONNECT after a refusing CONNACK: %v", describe(dp))
		}
	}
	connected(t, b, connectOpts{id: "ok", user: "svc", pass: "s3cret"})
}

// AllowPublish: a refused QoS 1 publish is answered 0x87 and not routed;
// a refused QoS 0 one is dropped.
func TestAllowPublish(t *testing.T) {
	b := start(t, Options{AllowPublish: func(id, topic string) bool { return topic != "secret" || id == "root" }})
	sub, _ := connected(t, b, connectOpts{id: "s", clean: true})
	sub.sub("secret", "open")
	pub, _ := connected(t, b, connectOpts{id: "p", clean: true})
	if r := pub.publish("secret", "no", nil); r != codeNotAuthorized {
		t.Fatalf("PUBACK 0x%02X, want 0x87", r)
	}
	pub.send(&packets.Publish{Topic: "secret", Payload: []byte("no0"), Properties: &packets.Properties{}})
	pub.mustPublish("open", "barrier")
	sub.puback(sub.expectPublish("barrier").PacketID) // nothing refused came before
	root, _ := connected(t, b, connectOpts{id: "root", clean: true})
	root.mustPublish("secret", "yes")
	sub.expectPublish("yes")
}

// AllowSubscribe: a refused filter is answered 0x87 in its SUBACK slot
// (the filter as written, "$share/..." included); the others are granted.
func TestAllowSubscribe(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	b := start(t, Options{AllowSubscribe: func(_, filter string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, filter)
		return filter != "$share/g/secret"
	}})
	c, _ := connected(t, b, connectOpts{id: "c", clean: true})
	r := c.subscribe(packets.SubOptions{Topic: "open", QoS: 1}, packets.SubOptions{Topic: "$share/g/secret", QoS: 1})
	if !bytes.Equal(r, []byte{1, codeNotAuthorized}) {
		t.Fatalf("SUBACK %v, want [1 0x87]", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"open", "$share/g/secret"}) {
		t.Fatalf("AllowSubscribe asked about %q", asked)
	}
	pub, _ := connected(t, b, connectOpts{id: "p", clean: true})
	if r := pub.publish("secret", "x", nil); r != 0x10 {
		t.Fatalf("PUBACK 0x%02X, want 0x10: the refused subscription must not exist", r)
	}
}

// An MQTT 3.1.1 (or 3.1) CONNECT gets the 3.1.1 CONNACK with return code
// 0x01 (unacceptable protocol version) and the connection is closed.
func TestMQTT311ConnectRefused(t *testing.T) {
	b := start(t, Options{})
	for name, connect := range map[string][]byte{
		"3.1.1": {0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 1, 'x'},
		"3.1":   {0x10, 15, 0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3, 0x02, 0, 60, 0, 1, 'x'},
	} {
		c := dial(t, b)
		if _, err := c.nc.Write(connect); err != nil {
			t.Fatal(err)
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(wait))
		got, _ := readAll(c)
		if !bytes.Equal(got, []byte{0x20, 2, 0, 1}) {
			t.Fatalf("%s CONNECT answered % x, then closed; want 20 02 00 01", name, got)
		}
	}
}

func readAll(c *client) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64)
	for {
		n, err := c.br.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// Protocol violations end the connection with the reason code that names
// them.
func TestProtocolViolations(t *testing.T) {
	b := start(t, Options{})
	for name, tc := range map[string]struct {
		p    *packets.Publish
		s    *packets.Subscribe
		code byte
	}{
		"qos2":        {p: &packets.Publish{Topic: "t", QoS: 2, PacketID: 1}, code: codeQoSUnsupported},
		"retain":      {p: &packets.Publish{Topic: "t", QoS: 1, PacketID: 1, Retain: true}, code: codeRetainUnsupported},
		"topic-alias": {p: &packets.Publish{Topic: "t", QoS: 1, PacketID: 1, Properties: &packets.Properties{TopicAlias: ptr(uint16(1))}}, code: codeTopicAliasInvalid},
		"wildcard":    {p: &packets.Publish{Topic: "a/+", QoS: 1, PacketID: 1}, code: codeTopicInvalid},
		"subscription-id": {s: &packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: "t"}},
			Properties: &packets.Properties{SubscriptionIdentifier: ptr(1)}}, code: codeSubIDsNotSupported},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := connected(t, b, connectOpts{id: name, clean: true})
			if tc.p != nil {
				if tc.p.Properties == nil {
					tc.p.Properties = &packets.Properties{}
				}
				c.send(tc.p)
			} else {
				c.send(tc.s)
			}
			dp := c.expectDisconnect(tc.code)
			if dp.Properties.ReasonString == "" {
				t.Error("no reason string")
			}
		})
	}
}

// A client that sends nothing for 1.5 times its keep-alive is
// disconnected (0x8D) and its will published; a normal DISCONNECT drops
// the will, DISCONNECT 0x04 publishes it, a will delay defers it until a
// resume cancels it.
func TestKeepAliveAndWill(t *testing.T) {
	b := start(t, Options{})
	watcher, _ := connected(t, b, connectOpts{id: "w", clean: true})
	watcher.sub("wills/#")
	will := func(s string) *packets.Publish {
		return &packets.Publish{Topic: "wills/" + s, Payload: []byte(s), QoS: 1}
	}

	idle, _ := connected(t, b, connectOpts{id: "idle", clean: true, keepAlive: 1, will: will("idle")})
	at := time.Now()
	idle.expectDisconnect(codeKeepAliveTimeout)
	if d := time.Since(at); d < 1400*time.Millisecond {
		t.Fatalf("closed after %v, before 1.5 times the 1s keep-alive", d)
	}
	watcher.puback(watcher.expectPublish("idle").PacketID)

	normal, _ := connected(t, b, connectOpts{id: "normal", clean: true, will: will("normal")})
	normal.send(&packets.Disconnect{Properties: &packets.Properties{}})
	waitFor(t, "normal's session ended", func() bool { return !b.state("normal").exists })
	withWill, _ := connected(t, b, connectOpts{id: "with", clean: true, will: will("with")})
	withWill.send(&packets.Disconnect{ReasonCode: 0x04, Properties: &packets.Properties{}})
	watcher.puback(watcher.expectPublish("with").PacketID) // not "normal": it would have come first

	delayed, _ := connected(t, b, connectOpts{id: "delayed", clean: true, expiry: 60, will: will("delayed"), willDelay: 1})
	_ = delayed.nc.Close()
	waitFor(t, "delayed disconnected", func() bool { return !b.state("delayed").connected })
	connected(t, b, connectOpts{id: "delayed", expiry: 60}) // resumed within the delay: no will
	late, _ := connected(t, b, connectOpts{id: "late", clean: true, expiry: 60, will: will("late"), willDelay: 1})
	_ = late.nc.Close()
	watcher.puback(watcher.expectPublish("late").PacketID) // after its delay, and not "delayed" first
}

// A subscriber that never reads does not hold a publisher back: its
// messages wait in its session.
func TestSlowSubscriberDoesNotBlockPublisher(t *testing.T) {
	b := start(t, Options{})
	stuck, _ := connected(t, b, connectOpts{id: "stuck", clean: true})
	stuck.sub("big")
	pub, _ := connected(t, b, connectOpts{id: "pub", clean: true})
	payload := string(make([]byte, 64<<10))
	start := time.Now()
	for range 200 { // 12.5 MiB: more than the socket buffers hold
		pub.mustPublish("big", payload)
	}
	t.Logf("200 × 64 KiB published in %v to a subscriber that reads nothing", time.Since(start))
	if s := b.state("stuck"); s.queued+s.outstanding != 200 {
		t.Fatalf("session holds %+v, want all 200", s)
	}
}

// A client that sends no client id gets one assigned.
func TestAssignedClientID(t *testing.T) {
	b := start(t, Options{})
	_, ca := connected(t, b, connectOpts{clean: true})
	if !hasPrefix(ca.Properties.AssignedClientID, "sluice-embedded-") {
		t.Fatalf("assigned client id %q", ca.Properties.AssignedClientID)
	}
	if !b.state(ca.Properties.AssignedClientID).connected {
		t.Fatal("no session under the assigned id")
	}
}
