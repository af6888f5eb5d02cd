package mem_test

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// harness gives each TCK subtest its own broker, so fault hooks and queues
// never leak between subtests.
type harness struct{ b *mem.Broker }

func (h *harness) MakeAdapter(context.Context) (ports.Adapter, error) { return mem.New(h.b) }
func (h *harness) Close()                                             { _ = h.b.Close(context.Background()) }
func (h *harness) FailDeadLetters(fail bool)                          { h.b.FailDeadLetters(fail) }
func (h *harness) FailSends(fail bool)                                { h.b.FailSends(fail) }

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
)

// TestTCK runs the whole contract kit against the in-process broker. The
// reference adapter declares every capability, so no case may skip.
func TestTCK(t *testing.T) {
	tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		b, err := mem.NewBroker()
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			if t.Skipped() {
				t.Errorf("TCK case %s skipped: the reference adapter must run every case", t.Name())
			}
		})
		return &harness{b: b}, nil
	})
}
