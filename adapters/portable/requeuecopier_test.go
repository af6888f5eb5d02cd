package portable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// A requeue copy goes to the requeuing subscription's queue only, with its
// count; a dead-letter copy still goes through SendBatch.
func TestRequeueCopiesGoThroughTheSubscription(t *testing.T) {
	ctx, b, a := newToy(t)
	subscribe := func(topic ports.Topic, group string) ports.Subscription {
		s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	g1, _, dlq := subscribe("t", "g1"), subscribe("t", "g2"), subscribe("t.dlq", "ops")
	if err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	ds, err := g1.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := g1.Settle(ctx, ds, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	again, err := g1.Receive(ctx, 1)
	if err != nil || string(again[0].Payload) != "m" || again[0].RedeliveryCount != 1 {
		t.Fatalf("after the requeue g1 got %v, %v; want the copy, counted once", again, err)
	}
	b.mu.Lock()
	n := len(b.queues[toyKey{"t", "g:g2"}].ready)
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("g2's queue holds %d messages, want 1: the requeue copy of g1 reached g2", n)
	}
	if err := g1.Settle(ctx, again, ports.Disposition{Action: ports.DeadLetter}); err != nil {
		t.Fatal(err)
	}
	if dead, err := dlq.Receive(ctx, 1); err != nil || string(dead[0].Payload) != "m" {
		t.Fatalf("dead-letter topic: %v, %v; want the copy published through SendBatch", dead, err)
	}
}

// newToy returns a bounded context, a toy broker and a portable adapter
// over it, closed when t ends.
func newToy(t *testing.T) (context.Context, *toyBroker, *portable.Adapter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	b := newToyBroker()
	a := portable.New(&toyDriver{b: b}, portable.Options{Logger: quiet})
	t.Cleanup(func() {
		_ = a.Close(context.Background())
		cancel()
	})
	return ctx, b, a
}

// DeclareGroup validates topic and group before the driver sees them.
func TestDeclareGroupValidates(t *testing.T) {
	ctx, b, a := newToy(t)
	for _, c := range []struct {
		topic ports.Topic
		group string
	}{{"orders", ""}, {"", "g"}} {
		if err := a.DeclareGroup(ctx, c.topic, c.group); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("DeclareGroup(%q, %q) = %v, want ErrInvalid", c.topic, c.group, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queues) != 0 {
		t.Fatalf("the driver declared %d queues", len(b.queues))
	}
}
