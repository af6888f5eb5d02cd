package tck

import (
	"context"
	"os"
	"os/exec"
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
	caps := mem.Capabilities()
	caps.TransactionalSend = true // the one capability mem has not: no in-process transaction
	all := Cases(caps)
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

// noUnchanged is mem's harness with an adopted topology whose Unchanged
// check is missing and whose Unobservable reason is empty.
type noUnchanged struct{ fallbackHarness }

func (h noUnchanged) CreateExisting(context.Context, ports.Topic, string) (Existing, error) {
	a, err := mem.New(h.b)
	if err != nil {
		return Existing{}, err
	}
	return Existing{Adapter: a, Names: "none"}, nil
}

const noUnchangedEnv = "SLUICE_TCK_NO_UNCHANGED"

// AdoptExistingTopology fails a harness that neither checks that the
// topology was left unchanged nor says why it cannot: a check left out
// silently would pass as if it had been made.
func TestAdoptExistingFailsWithoutUnchangedOrReason(t *testing.T) {
	if os.Getenv(noUnchangedEnv) != "" {
		k := newKit(t, func(context.Context, *testing.T) (Harness, error) {
			b, err := mem.NewBroker()
			if err != nil {
				return nil, err
			}
			return noUnchanged{fallbackHarness{b}}, nil
		}, Options{}.withDefaults())
		caseAdoptExisting(k)
		return
	}
	if testing.Short() {
		t.Skip("SKIP: re-executes the test binary to run a failing case; not in -short")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), noUnchangedEnv+"=1")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "neither an Unchanged check nor why it has none") {
		t.Fatalf("AdoptExistingTopology accepted a harness without an Unchanged check or a reason (err %v):\n%s", err, b)
	}
}
