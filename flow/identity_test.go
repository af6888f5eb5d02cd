package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// A message made while handling a delivery without identity (a foreign
// producer's, on a broker that assigns none) carries no empty causation
// or correlation header; one made from a delivery with an identity
// carries it as both.
func TestNewMessageFromDeliveryWithoutIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	made := make(chan ports.Headers, 2)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g"})
	flow.Sink(p.Source(), func(ctx context.Context, d *ports.Delivery) error {
		m, err := flow.NewMessage(ctx, "out", struct{}{})
		if err != nil {
			return err
		}
		made <- m.Headers
		return nil
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	if err := a.SendForeign(ctx, "in", []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	h := next(ctx, t, made)
	for _, k := range []string{ports.HeaderCausationID, ports.HeaderCorrelationID} {
		if v, ok := h.Lookup(k); ok {
			t.Errorf("header %s = %q on a message caused by a delivery without identity; want it absent", k, v)
		}
	}
	if err := a.Send(ctx, ports.Message{Topic: "in", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m-1")}); err != nil {
		t.Fatal(err)
	}
	h = next(ctx, t, made)
	if h.Get(ports.HeaderCausationID) != "m-1" || h.Get(ports.HeaderCorrelationID) != "m-1" {
		t.Errorf("causation %q correlation %q, want m-1 and m-1", h.Get(ports.HeaderCausationID), h.Get(ports.HeaderCorrelationID))
	}
}

func next(ctx context.Context, t *testing.T, made <-chan ports.Headers) ports.Headers {
	t.Helper()
	select {
	case h := <-made:
		return h
	case <-ctx.Done():
		t.Fatal("the handler never made its message")
		return nil
	}
}
