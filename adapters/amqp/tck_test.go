package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// harness makes adapters on the package's RabbitMQ node under a namespace
// of its own, with shared fault switches.
type harness struct {
	url    string
	ns     string
	qt     amqp.QueueType
	faults *amqp.Faults
}

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	o := amqp.WithFaults(amqp.Options{URL: h.url, Namespace: h.ns, QueueType: h.qt}, h.faults)
	return amqp.New(ctx, o)
}
func (h *harness) Close()                    {}
func (h *harness) FailDeadLetters(fail bool) { h.faults.FailDeadLetters(fail) }
func (h *harness) FailSends(fail bool)       { h.faults.FailSends(fail) }

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
)

func runTCK(t *testing.T, qt amqp.QueueType, opts tck.Options) {
	node := rabbittest.Shared(t)
	tck.RunWith(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		t.Cleanup(func() {
			if t.Skipped() {
				t.Errorf("TCK case %s skipped: the amqp adapter declares every capability the kit asks for", t.Name())
			}
		})
		return &harness{url: node.URL, ns: namespace("tck"), qt: qt, faults: &amqp.Faults{}}, nil
	}, opts)
}

// TestTCK runs the whole contract kit against a real RabbitMQ with quorum
// queues (the default). No case may skip. RabbitMQ checks x-expires of a
// quorum queue at its quorum tick (quorum_tick_interval, 5s by default),
// so an idle instance queue goes between TTL and TTL+5s after its last
// consumer left: the instance-expiry case uses a 4s TTL and waits 12s.
func TestTCK(t *testing.T) { runTCK(t, amqp.Quorum, tck.Options{InstanceTTL: 4 * time.Second}) }

// TestTCKClassic runs the kit with classic queues, whose expiry timers are
// exact and whose redelivery count is a lower bound (the kit then checks
// that it increases).
func TestTCKClassic(t *testing.T) { runTCK(t, amqp.Classic, tck.Options{}) }
