package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

// demoGroup is the group of the source topic the sample orders are
// consumed (and failed) by; redriven orders come back to it.
const demoGroup = "demo-app"

// seedEpoch is the publish time of the first sample order, fixed so that a
// session's output is the same on every run.
var seedEpoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// seed declares the area and the demo group, then publishes n sample
// orders and dead-letters each with one of two reasons, as a consumer
// whose handler rejects them would.
func seed(ctx context.Context, a ports.Adapter, area *deadletter.Area, n int) error {
	if _, err := area.Declare(ctx, deadletter.Retention{}); err != nil {
		return err
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: area.Source(), Groups: []string{demoGroup}}); err != nil {
		var re *ports.RedeclareError
		if !errors.As(err, &re) {
			return err
		}
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: area.Source(), Group: demoGroup, InFlight: n,
		Retry: ports.RetryPolicy{MaxAttempts: -1}})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Stop(context.WithoutCancel(ctx)) }()
	msgs := make([]ports.Message, n)
	reasons := make(map[string]error, n)
	for i := range n {
		id := fmt.Sprintf("order-%d", i+1)
		total := 10 * (i + 1)
		reasons[id] = ports.Poisonf("unknown schema version 3")
		if i%3 != 2 {
			total = -total
			reasons[id] = ports.Poisonf("order total is negative")
		}
		msgs[i] = ports.Message{Topic: area.Source(), Key: fmt.Sprintf("customer-%d", i%2+1),
			Payload: fmt.Appendf(nil, `{"id":"order-%d","total":%d,"card":"4111-1111-1111-%04d"}`, i+1, total, i+1),
			Headers: ports.NewHeaders(
				ports.HeaderID, id,
				ports.HeaderType, "com.example.order.placed.v1",
				ports.HeaderContentType, "application/json",
				ports.HeaderTime, seedEpoch.Add(time.Duration(i)*time.Minute).Format(time.RFC3339),
			)}
	}
	if err := a.Send(ctx, msgs...); err != nil {
		return err
	}
	for got := 0; got < n; {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ds, err := sub.Receive(rctx, n-got)
		cancel()
		if err != nil {
			return fmt.Errorf("receiving the sample orders (%d of %d): %w", got, n, err)
		}
		for _, d := range ds {
			disp := ports.Disposition{Action: ports.DeadLetter, Reason: reasons[d.ID], Attempts: d.RedeliveryCount + 1}
			if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
				return err
			}
		}
		got += len(ds)
	}
	return nil
}
