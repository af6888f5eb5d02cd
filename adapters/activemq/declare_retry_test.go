package activemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestDeclareGroupRetriesALostConnection: a group declare whose connection
// dies after CONNECTED, at its SUBSCRIBE, is retried on a new connection,
// and the declared group then keeps what is published before its first
// consumer.
func TestDeclareGroupRetriesALostConnection(t *testing.T) {
	p, err := faults.NewProxy(activemqtest.Shared(t).StompAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a := newAdapter(t, activemq.Options{Addr: p.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	before := p.Stats()
	p.ResetOn("SUBSCRIBE\n")
	if err := ports.DeclareGroup(ctx, a, "jobs", "workers"); err != nil {
		t.Fatalf("DeclareGroup over a connection reset at its SUBSCRIBE: %v, want it retried on a new connection", err)
	}
	after := p.Stats()
	if n := after.Reset - before.Reset; n != 1 {
		t.Fatalf("the proxy reset %d connections, want 1: the retry was not exercised", n)
	}
	if n := after.Accepted - before.Accepted; n < 2 {
		t.Fatalf("the declare used %d connection(s), want at least 2 (the reset one and its retry)", n)
	}
	keepsEarlyMessage(t, ctx, a, "jobs", "workers")
}
