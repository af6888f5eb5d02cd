package operators_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// TestInvalidOptionsFailStart: a stage built with invalid options does not
// panic; the pipeline's Start reports ErrInvalid.
func TestInvalidOptionsFailStart(t *testing.T) {
	id := func(_ context.Context, d *ports.Delivery) (*ports.Delivery, error) { return d, nil }
	cases := map[string]func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery]{
		"Timeout(0)": func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery] { return operators.Timeout(s, 0) },
		"Delay(-1)":  func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery] { return operators.Delay(s, -1) },
		"RedeliveryLimit(0)": func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery] {
			return operators.RedeliveryLimit(s, 0)
		},
		"Throttle(rate 0)": func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery] {
			return operators.Throttle(s, operators.ThrottleOptions{})
		},
		"Concurrent(limit<0)": func(s flow.Stream[*ports.Delivery]) flow.Stream[*ports.Delivery] {
			return operators.Concurrent(s, id, operators.ConcurrentOptions{Limit: -1})
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			p := flow.New(newFake(), spec)
			flow.Sink(build(p.Source()), func(context.Context, *ports.Delivery) error { return nil })
			if err := p.Start(context.Background()); !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Start returned %v, want ErrInvalid", err)
			}
		})
	}
}
