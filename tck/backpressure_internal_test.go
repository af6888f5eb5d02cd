package tck

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

// overDelivering is mem with a subscription that hands out four times as
// many deliveries as the core asks for: an adapter that ignores the
// in-flight limit.
type overDelivering struct{ *mem.Adapter }

func (a overDelivering) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	spec.InFlight = 4 * spec.WithDefaults().InFlight // mem bounds what it hands out by the spec
	s, err := a.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	return overSub{s}, nil
}

type overSub struct{ ports.Subscription }

func (s overSub) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	return s.Subscription.Receive(ctx, 4*limit)
}

type overHarness struct{ b *mem.Broker }

func (h overHarness) MakeAdapter(context.Context) (ports.Adapter, error) {
	a, err := mem.New(h.b)
	if err != nil {
		return nil, err
	}
	return overDelivering{a}, nil
}
func (h overHarness) Close() { _ = h.b.Close(context.Background()) }

const overDeliveringEnv = "SLUICE_TCK_OVER_DELIVERING"

// The backpressure case must fail against an adapter that hands out more
// deliveries than the in-flight limit allows: it counts what the adapter
// hands out, with more handler goroutines than the limit. It runs the
// case in a re-executed test binary, where it must fail.
func TestBackpressureCaseFailsAnAdapterThatOverDelivers(t *testing.T) {
	if os.Getenv(overDeliveringEnv) != "" {
		k := newKit(t, func(context.Context, *testing.T) (Harness, error) {
			b, err := mem.NewBroker()
			if err != nil {
				return nil, err
			}
			return overHarness{b}, nil
		}, Options{}.withDefaults())
		caseBackpressure(k)
		return
	}
	if testing.Short() {
		t.Skip("SKIP: re-executes the test binary to run a failing case; not in -short")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), overDeliveringEnv+"=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err == nil || !strings.Contains(out, "--- FAIL: "+t.Name()) {
		t.Fatalf("the backpressure case passed against an adapter that over-delivers (err %v):\n%s", err, out)
	}
	if !strings.Contains(out, "more deliveries than asked") && !strings.Contains(out, "handed out") {
		t.Fatalf("the backpressure case failed, but not for handing out too much:\n%s", out)
	}
	t.Logf("failed as it must: %s", lastFatal(out))
}

func lastFatal(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "cases_lifecycle.go") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
