package activemq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestInstanceRefusalWithoutItsErrorFrame: ActiveMQ refuses a client id in
// use with an ERROR frame and closes the connection without waiting for
// the frame to go out, so the refusal can arrive as a connection closed in
// the handshake. The proxy plays that: it resets the connection that
// carries the instance's client id. The adapter tells it from a port that
// does not speak plaintext STOMP by a connection without the client id,
// and reports the instance as refused.
func TestInstanceRefusalWithoutItsErrorFrame(t *testing.T) {
	p, err := faults.NewProxy(activemqtest.Shared(t).StompAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a := newAdapter(t, activemq.Options{Addr: p.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := ports.SubscriptionSpec{Topic: "ticks", Mode: ports.Broadcast, Instance: "inst-lost-frame", InFlight: 4}

	before := p.Stats()
	p.ResetOn("client-id:sluice-instance") // the value's colon travels escaped
	s, err := a.Subscribe(ctx, spec)
	if err == nil {
		_ = s.Stop(ctx)
		t.Fatal("Subscribe succeeded although its connection was closed in the handshake")
	}
	if !errors.Is(err, ports.ErrInstanceShared) || !strings.Contains(err.Error(), "accepted one without it") {
		t.Fatalf("Subscribe over a handshake closed on the client id returned %v; want ErrInstanceShared saying the broker accepted a connection without the client id", err)
	}
	if n := p.Stats().Reset - before.Reset; n != 1 {
		t.Fatalf("the proxy reset %d connections, want 1: the lost refusal was not exercised", n)
	}

	// The check's own connection holds nothing: with the proxy disarmed
	// the instance is free.
	s, err = a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatalf("Subscribe after the refusal: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
