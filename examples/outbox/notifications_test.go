package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Two events without identity (another program publishing without an
// id, on a broker that assigns none) are two emails, not one email and a
// "duplicate"; an event with an id sent twice is one email.
func TestNotificationsHandleEveryMessageWithoutIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := openDB(ctx, filepath.Join(t.TempDir(), "n.db"), notificationsSchema)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	n := &notifications{db: db, changed: make(chan struct{})}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "notifications"})
	flow.Sink(flow.Decode[OrderPlaced](p.Source()), n.handle)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	body := []byte(`{"order":"o-1","customer":"ann","cents":100}`)
	for range 2 {
		if err := a.SendForeign(ctx, "orders", body, nil); err != nil {
			t.Fatal(err)
		}
	}
	m := ports.Message{Topic: "orders", Payload: []byte(`{"order":"o-2","customer":"bob","cents":200}`), Headers: ports.NewHeaders(ports.HeaderID, "evt-2")}
	if err := a.Send(ctx, m, m); err != nil {
		t.Fatal(err)
	}
	if err := n.waitDeliveries(ctx, 4); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.emailed) != 3 || n.duplicates != 1 {
		t.Fatalf("emailed %v with %d duplicates; want o-1 twice and o-2 once, one duplicate", n.emailed, n.duplicates)
	}
}
