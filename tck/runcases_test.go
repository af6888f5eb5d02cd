package tck_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

type memHarness struct{ b *mem.Broker }

func (h *memHarness) MakeAdapter(context.Context) (ports.Adapter, error) { return mem.New(h.b) }
func (h *memHarness) Close()                                             { _ = h.b.Close(context.Background()) }

// The secure-transport cases exist in the kit and run on their own, each
// with a fresh harness.
func TestRunCasesRunsTheNamedCases(t *testing.T) {
	names := tck.CaseNames()
	for _, n := range tck.SecureTransportCases {
		if !slices.Contains(names, n) {
			t.Fatalf("SecureTransportCases names %q, which is no case of the kit (%v)", n, names)
		}
	}
	made := 0
	tck.RunCases(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		made++
		b, err := mem.NewBroker()
		if err != nil {
			return nil, err
		}
		return &memHarness{b: b}, nil
	}, tck.Options{}, tck.SecureTransportCases...)
	if made != len(tck.SecureTransportCases) {
		t.Fatalf("%d harnesses made for %d cases; want one per case", made, len(tck.SecureTransportCases))
	}
}
