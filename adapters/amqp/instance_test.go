package amqp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/ports"
)

// TestBroadcastInstanceCollisionRefused: a second running subscription
// with the same Broadcast Instance — from another adapter (process) or
// the same one — fails at Subscribe with ErrInvalid naming the instance,
// instead of starting and silently sharing the instance's copy. Once the
// first stops, the Instance can be taken again; LOAD_BALANCE consumers of
// one group still share their queue.
func TestBroadcastInstanceCollisionRefused(t *testing.T) {
	for _, qt := range []amqp.QueueType{amqp.Quorum, amqp.Classic} {
		t.Run(string(qt), func(t *testing.T) { testInstanceCollision(t, qt) })
	}
}

func testInstanceCollision(t *testing.T, qt amqp.QueueType) {
	ns := namespace("collide")
	a := newAdapter(t, amqp.Options{Namespace: ns, QueueType: qt})
	b := newAdapter(t, amqp.Options{Namespace: ns, QueueType: qt})
	spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1", InstanceTTL: time.Minute}
	first, err := a.Subscribe(testCtx(t), spec)
	if err != nil {
		t.Fatalf("first Subscribe: %v", err)
	}
	for name, ad := range map[string]*amqp.Adapter{"another adapter": b, "the same adapter": a} {
		s, err := ad.Subscribe(testCtx(t), spec)
		if err == nil {
			_ = s.Stop(testCtx(t))
			t.Fatalf("second Subscribe with Instance %q on %s succeeded, want it refused", spec.Instance, name)
		}
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), `"node-1"`) || !strings.Contains(err.Error(), "same Instance") {
			t.Fatalf("second Subscribe on %s returned %v, want ErrInvalid naming instance \"node-1\" and saying it is shared", name, err)
		}
	}
	// The refused attempts did not disturb the first consumer.
	send(t, b, "prices", "m1")
	d := receive1(t, first)
	if err := first.Settle(testCtx(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := first.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Stopped, the instance resumes elsewhere (its queue was kept for InstanceTTL).
	send(t, a, "prices", "m2")
	again := subscribe(t, b, spec)
	if d := receive1(t, again); d.ID != "m2" {
		t.Fatalf("resumed instance received %q, want m2", d.ID)
	}

	// LOAD_BALANCE is unaffected: two consumers of one group share its queue.
	lb := ports.SubscriptionSpec{Topic: "orders", Group: "billing"}
	_ = subscribe(t, a, lb)
	_ = subscribe(t, b, lb)
}

// TestBroadcastInstanceSurvivesConnectionLoss: the exclusive consumer of
// a Broadcast queue dies with its connection, so the subscription's
// reconnect takes the queue again and receives what was sent meanwhile.
func TestBroadcastInstanceSurvivesConnectionLoss(t *testing.T) {
	for _, qt := range []amqp.QueueType{amqp.Quorum, amqp.Classic} {
		t.Run(string(qt), func(t *testing.T) { testInstanceReconnect(t, qt) })
	}
}

func testInstanceReconnect(t *testing.T, qt amqp.QueueType) {
	p := newProxied(t, "collide-rc", qt)
	a, direct := p.a, p.direct
	spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1"}
	s := subscribe(t, a, spec)
	got := receiveAsync(s)
	p.cut(t)
	select {
	case err := <-s.Errors():
		if err == nil {
			t.Fatal("Errors closed before reporting the lost channel")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no lost channel reported on Errors within 20s of cutting the connection")
	}
	send(t, direct, "prices", "after-cut")
	if d := <-got; d.ID != "after-cut" {
		t.Fatalf("received %q after reconnect, want after-cut", d.ID)
	}
	// And the re-established consumer still holds the instance.
	if _, err := direct.Subscribe(testCtx(t), spec); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Subscribe with the reconnected Instance returned %v, want ErrInvalid", err)
	}
}
