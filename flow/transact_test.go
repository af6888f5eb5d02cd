package flow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Start refuses a TransactSink on an adapter without TransactionalSend
// (every adapter but kafka) with an error wrapping ports.ErrExactlyOnce
// that names the adapter and what to do, before subscribing.
func TestTransactSinkRefusedWithoutTransactionalSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	for name, a := range map[string]ports.Adapter{"fake": newFake(), "mem": m} {
		for _, qos := range []ports.QoS{ports.ExactlyOnce, ports.AtLeastOnce} {
			p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: qos})
			flow.TransactTo(flow.Decode[string](p.Source()), "out")
			err := p.Start(ctx)
			if err == nil {
				_ = p.Stop(ctx)
				t.Fatalf("%s, %v: Start accepted a TransactSink", name, qos)
			}
			if !errors.Is(err, ports.ErrExactlyOnce) || !strings.Contains(err.Error(), "TransactionalSend") || !strings.Contains(err.Error(), "inbox.Sink") {
				t.Errorf("%s, %v: Start = %v; want ErrExactlyOnce naming TransactionalSend and inbox.Sink", name, qos, err)
			}
		}
	}
}

// TransactSink declares an exactly-once effect: it passes the sink check
// of QoS ExactlyOnce, so only the adapter's capability refuses it.
func TestTransactSinkAfterFlatMapRefused(t *testing.T) {
	p := flow.New(newFake(), exactlyOnceSpec())
	parts := flow.FlatMap(flow.Decode[string](p.Source()), func(_ context.Context, s string) ([]string, error) { return []string{s, s}, nil })
	flow.TransactTo(parts, "out")
	err := p.Start(context.Background())
	if !errors.Is(err, ports.ErrExactlyOnce) || !strings.Contains(err.Error(), "FlatMap") {
		t.Fatalf("Start = %v; want ErrExactlyOnce naming the FlatMap", err)
	}
}
