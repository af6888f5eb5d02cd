package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

// An operator lists a topic's dead letters, redrives those whose cause was
// fixed, and the redriven copies carry their audit id.
func ExampleArea_Redrive() {
	ctx := context.Background()
	b, _ := mem.NewBroker()
	defer b.Close(ctx)
	a, _ := mem.New(b)

	area, _ := deadletter.New(a, "orders", "billing-ops", deadletter.Options{
		Idle:   50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewID:  func() string { return "audit-1" },
	})
	_, _ = area.Declare(ctx, deadletter.Retention{}) // before the first dead letter
	_ = ports.DeclareGroup(ctx, a, "orders", "billing")

	// The billing consumer dead-letters two orders.
	_ = a.Send(ctx,
		ports.Message{Topic: "orders", Headers: ports.NewHeaders(ports.HeaderID, "o-1")},
		ports.Message{Topic: "orders", Headers: ports.NewHeaders(ports.HeaderID, "o-2")})
	sub, _ := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	for n := 0; n < 2; {
		ds, _ := sub.Receive(ctx, 2)
		_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("total is negative")})
		n += len(ds)
	}

	entries, pass, _ := area.List(ctx, deadletter.Filter{Reason: "negative"})
	for _, e := range entries {
		fmt.Println(e.ID, e.Source, e.Reason)
	}
	fmt.Println("pass ended", pass.End)

	res, _ := area.Redrive(ctx, deadletter.Request{Operator: "alice", Note: "fixed the total check"})
	fmt.Println("redriven", res.Done, "audit", res.AuditID)

	ds, _ := sub.Receive(ctx, 1)
	fmt.Println(ds[0].ID, "redrive count", ds[0].Headers.Get(deadletter.HeaderRedriveCount))
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack})
	_ = sub.Stop(ctx)
	// Output:
	// o-1 orders total is negative
	// o-2 orders total is negative
	// pass ended wrapped
	// redriven 2 audit audit-1
	// o-1 redrive count 1
}
