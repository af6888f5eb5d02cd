package mem_test

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestReliability runs the fault kit against the in-process broker, a
// fresh broker per scenario. The broker lives in the test process, so the
// connection faults (restart, reset, black hole, stall) and the consumer
// process kill do not apply and are skipped, saying so. The soak (1,000,000
// messages) runs with:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/mem/
func TestReliability(t *testing.T) {
	faults.Run(t, faults.Target{
		Name:         "mem",
		SoakMessages: 1_000_000,
		Start: func(t *testing.T) *faults.Broker {
			b, err := mem.NewBroker()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			return &faults.Broker{
				Dial:            func(context.Context, string) (ports.Adapter, error) { return mem.New(b) },
				FailDeadLetters: b.FailDeadLetters,
				FailSends:       b.FailSends,
				FailSendsNote:   "mem refuses the publish: nothing is stored",
			}
		},
	})
}
