package tck

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

// atLeastOnceOnly is mem as an adapter without a best-effort class would
// be: it declares no BestEffort capability and serves QoS BestEffort with
// the documented fallback, at-least-once.
type atLeastOnceOnly struct{ *mem.Adapter }

func (a atLeastOnceOnly) Capabilities() ports.Capabilities {
	c := a.Adapter.Capabilities()
	c.BestEffort = false
	return c
}

func (a atLeastOnceOnly) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	spec.QoS = ports.AtLeastOnce
	return a.Adapter.Subscribe(ctx, spec)
}

func (a atLeastOnceOnly) Send(ctx context.Context, msgs ...ports.Message) error {
	msgs = slices.Clone(msgs)
	for i := range msgs {
		msgs[i].QoS = ports.AtLeastOnce
	}
	return a.Adapter.Send(ctx, msgs...)
}

type fallbackHarness struct{ b *mem.Broker }

func (h fallbackHarness) MakeAdapter(context.Context) (ports.Adapter, error) {
	a, err := mem.New(h.b)
	if err != nil {
		return nil, err
	}
	return atLeastOnceOnly{a}, nil
}
func (h fallbackHarness) Close() { _ = h.b.Close(context.Background()) }

// BestEffortQoS's at-least-once branch (mem itself takes the native one):
// the failed message is redelivered and the poison one dead-lettered.
func TestBestEffortCaseFallbackBranch(t *testing.T) {
	k := newKit(t, func(context.Context, *testing.T) (Harness, error) {
		b, err := mem.NewBroker()
		if err != nil {
			return nil, err
		}
		return fallbackHarness{b}, nil
	}, Options{}.withDefaults())
	if k.caps.BestEffort {
		t.Fatal("the wrapper must declare no BestEffort capability")
	}
	caseBestEffort(k)
}

// Every Port case skips by the capability it needs, naming it, and runs
// where the capability is declared.
func TestPortCasesSkipByCapability(t *testing.T) {
	none := Cases(ports.Capabilities{})
	all := Cases(new(mem.Adapter).Capabilities())
	want := map[string]string{
		"TopicRetention":                   "Retention",
		"GroupDeclaredBeforeFirstConsumer": "DurableGroups",
		"NewGroupStartsAtEarliest":         "StartEarliest",
		"SingleActiveConsumerFailover":     "SingleActive",
		"OversizedPayloadRefused":          "MaxMessageBytes",
	}
	seen := 0
	for i, c := range none {
		if capName, ok := want[c.Name]; ok {
			seen++
			if !strings.Contains(c.Skip, capName) {
				t.Errorf("%s skip %q does not name %s", c.Name, c.Skip, capName)
			}
		}
		if all[i].Skip != "" {
			t.Errorf("%s skipped for mem's capabilities: %s", c.Name, all[i].Skip)
		}
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d capability-gated Port cases", seen, len(want))
	}
}
