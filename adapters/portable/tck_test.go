package portable_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// toyHarness gives each TCK subtest its own toy broker.
type toyHarness struct{ b *toyBroker }

func (h *toyHarness) MakeAdapter(context.Context) (ports.Adapter, error) {
	return portable.New(&toyDriver{b: h.b}, portable.Options{Logger: quiet}), nil
}
func (h *toyHarness) Close()                    {}
func (h *toyHarness) FailDeadLetters(fail bool) { h.b.setFailDLQ(fail) }
func (h *toyHarness) FailSends(fail bool)       { h.b.setFailSends(fail) }

// PublishForeign stores the body without any header, as a producer
// without sluice does: the toy broker assigns no identity.
func (h *toyHarness) PublishForeign(_ context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	return ports.IDNone, h.b.publish(ports.Message{Topic: topic, Payload: m.Body})
}

// CreateExisting declares a group's queue under names of its own, as a
// program without sluice would, and returns an adapter that adopts them.
func (h *toyHarness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	physTopic, physGroup := ports.Topic("legacy.e."+string(topic)), "legacy.q."+group
	legacy := &toyDriver{b: h.b}
	if err := legacy.DeclareGroup(ctx, physTopic, physGroup); err != nil {
		return tck.Existing{}, err
	}
	before := h.queues()
	d := &toyDriver{b: h.b, topics: map[ports.Topic]ports.Topic{topic: physTopic}, groups: map[string]string{group: physGroup}}
	return tck.Existing{
		Adapter: portable.New(d, portable.Options{Logger: quiet}),
		Names:   fmt.Sprintf("topic %s, queue %s", physTopic, physGroup),
		Publish: func(_ context.Context, payload []byte) error {
			return h.b.publish(ports.Message{Topic: physTopic, Payload: payload})
		},
		Unchanged: func(context.Context) error {
			if after := h.queues(); after != before {
				return fmt.Errorf("queues were %s before adoption, now %s", before, after)
			}
			return nil
		},
	}, nil
}

func (h *toyHarness) queues() string {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	n := 0
	for k := range h.b.queues {
		if !k.broadcast() {
			n++
		}
	}
	return fmt.Sprintf("%d group queue(s)", n)
}

var (
	_ tck.DeadLetterFaults = (*toyHarness)(nil)
	_ tck.SendFaults       = (*toyHarness)(nil)
	_ tck.ForeignProducer  = (*toyHarness)(nil)
	_ tck.Topology         = (*toyHarness)(nil)
)

// TestToyDriverTCK runs the whole contract kit against the toy driver
// through the portable layer.
func TestToyDriverTCK(t *testing.T) {
	tck.Run(t, func(context.Context, *testing.T) (tck.Harness, error) {
		return &toyHarness{b: newToyBroker()}, nil
	})
}
