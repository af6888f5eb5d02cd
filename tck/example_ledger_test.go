package tck_test

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// A ledger follows every message from the confirmed send to its
// settlement; a message confirmed and never acked nor dead-lettered is
// lost.
func ExampleLedger() {
	ctx := context.Background()
	b, _ := mem.NewBroker()
	defer func() { _ = b.Close(ctx) }()
	a, _ := mem.New(b)

	l := tck.NewLedger("mem", "example")
	p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"}, l.Observer())
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		if string(d.Payload) == "bad" {
			return ports.Poisonf("rejected")
		}
		return nil
	})
	_ = p.Start(ctx)

	_ = l.Send(ctx, a,
		ports.Message{Topic: "orders", Payload: []byte("ok")},
		ports.Message{Topic: "orders", Payload: []byte("bad")})
	_ = l.AwaitSettled(ctx)
	_ = p.Stop(ctx)

	r := l.Report()
	fmt.Printf("published=%d acked=%d dead=%d lost=%d dup=%d\n", r.Confirmed, r.Acked, r.DeadLettered, r.Lost, r.Duplicates)
	// Output: published=2 acked=1 dead=1 lost=0 dup=0
}
