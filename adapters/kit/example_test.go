package kit_test

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// logBroker is a kit.Broker that prints what the Settler asks of it.
type logBroker struct{}

func (logBroker) Ack(_ context.Context, ds []*ports.Delivery) error {
	fmt.Println("ack", len(ds), "in one call")
	return nil
}

func (logBroker) Publish(_ context.Context, msgs []ports.Message) []error {
	for _, m := range msgs {
		fmt.Println("publish", m.Topic, "reason:", m.Headers.Get(ports.HeaderDeadLetterReason))
	}
	return nil
}

// A Settler turns a dead-letter disposition into confirmed copies to
// "<topic>.dlq" followed by one ack of the originals; a second settlement
// of the same deliveries is refused.
func ExampleSettler() {
	s := kit.NewSettler(logBroker{})
	ds := []*ports.Delivery{
		{Message: ports.Message{Topic: "orders"}, ID: "m-1", Handle: &handle{}},
		{Message: ports.Message{Topic: "orders"}, ID: "m-2", Handle: &handle{}},
	}
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poisonf("bad total")}
	fmt.Println(s.Settle(context.Background(), ds, disp))
	fmt.Println(s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}))
	// Output:
	// publish orders.dlq reason: poison: bad total
	// publish orders.dlq reason: poison: bad total
	// ack 2 in one call
	// <nil>
	// settle "m-1": conflicting completion: ACK asked, DEAD_LETTER is done already
}
