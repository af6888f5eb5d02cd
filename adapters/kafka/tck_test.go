package kafka_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// TestTCK runs the whole contract kit against an in-process kfake cluster
// (a Kafka wire-protocol peer, not Apache Kafka), or against the real
// cluster named by KAFKA_BROKERS.
func TestTCK(t *testing.T) {
	if realKafka() {
		t.Log("TCK against KAFKA_BROKERS=" + strings.Join(newBroker(t).addrs, ","))
		tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
			return &harness{b: newBroker(t)}, nil
		})
		return
	}
	t.Log("TCK against kfake: a Kafka wire-protocol peer, not Apache Kafka")
	tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		return &fakeHarness{harness: harness{b: newBroker(t)}}, nil
	})
}

// harness makes adapters on one broker; it has no fault hooks (a real
// Kafka cannot be told to refuse), but kills transactional consumers
// (txnkill_test.go).
type harness struct {
	b     *broker
	kills killSwitches
}

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	cfg, ks := h.kills.wire(h.b.config("tck", 2))
	cfg.TransactionTimeout = 2 * time.Second // a killed consumer's open transaction is aborted after it
	a, err := kafka.New(ctx, cfg)
	if err == nil {
		h.kills.add(a, ks)
	}
	return a, err
}

func (h *harness) Close() {}

// fakeHarness adds fault injection through kfake.
type fakeHarness struct {
	harness
	mu    sync.Mutex
	dlq   *kfake.FaultHandle
	sends *kfake.FaultHandle
}

var (
	_ tck.DeadLetterFaults = (*fakeHarness)(nil)
	_ tck.SendFaults       = (*fakeHarness)(nil)
)

// FailDeadLetters makes kfake refuse every produce to a ".dlq" topic.
func (h *fakeHarness) FailDeadLetters(fail bool) {
	h.toggle(&h.dlq, fail, func(req kmsg.Request) bool {
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if strings.HasSuffix(tp.Topic, ".dlq") {
				return true
			}
		}
		return false
	})
}

// FailSends makes kfake refuse every produce.
func (h *fakeHarness) FailSends(fail bool) { h.toggle(&h.sends, fail, nil) }

func (h *fakeHarness) toggle(slot **kfake.FaultHandle, fail bool, when func(kmsg.Request) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *slot != nil {
		(*slot).Remove()
		*slot = nil
	}
	if fail {
		*slot = h.b.cluster.Fault(kfake.Fault{
			Keys:  []kmsg.Key{kmsg.Produce},
			Err:   kerr.TopicAuthorizationFailed,
			Count: -1,
			When:  when,
		})
	}
}

func (h *fakeHarness) Close() {
	h.FailDeadLetters(false)
	h.FailSends(false)
}
