package mem_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// PublishForeign implements tck.ForeignProducer: the message is stored
// without any header. The in-process broker assigns no identity, so the
// reference adapter exercises the no-identity rule.
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	a, err := mem.New(h.b)
	if err != nil {
		return ports.IDNone, err
	}
	defer a.Close(ctx)
	return ports.IDNone, a.SendForeign(ctx, topic, m.Body, nil)
}

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
	_ tck.ForeignProducer  = (*harness)(nil)
)

// TestTCK runs the whole contract kit against the in-process broker. The
// reference adapter declares every capability but TransactionalSend (it
// has no transaction spanning a consumed position and produced
// messages), so no other case may skip.
func TestTCK(t *testing.T) {
	tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		b, err := mem.NewBroker()
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			if t.Skipped() && !strings.HasSuffix(t.Name(), "/ExactlyOnceTransform") {
				t.Errorf("TCK case %s skipped: the reference adapter must run every case", t.Name())
			}
		})
		return &harness{b: b}, nil
	})
}

// CreateExisting implements tck.Topology: a "legacy" adapter without any
// mapping declares the group's queue under names of its own, as a program
// written before sluice would have, and the returned adapter adopts them
// with mem.WithExisting.
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	legacy, err := mem.New(h.b)
	if err != nil {
		return tck.Existing{}, err
	}
	physTopic, physGroup := ports.Topic("legacy.e."+string(topic)), "legacy.q."+group
	if err := legacy.DeclareGroup(ctx, physTopic, physGroup); err != nil {
		return tck.Existing{}, err
	}
	before := queueNames(h.b.Stats())
	a, err := mem.New(h.b, mem.WithExisting(mem.Existing{Topic: topic, As: physTopic, Groups: map[string]string{group: physGroup}}))
	if err != nil {
		return tck.Existing{}, err
	}
	return tck.Existing{
		Adapter: a,
		Names:   fmt.Sprintf("topic %s, queue %s", physTopic, physGroup),
		Publish: func(ctx context.Context, payload []byte) error {
			return legacy.Send(ctx, ports.Message{Topic: physTopic, Payload: payload})
		},
		Unchanged: func(context.Context) error {
			if after := queueNames(h.b.Stats()); !slices.Equal(after, before) {
				return fmt.Errorf("queues were %v before adoption, now %v", before, after)
			}
			return nil
		},
	}, nil
}

var _ tck.Topology = (*harness)(nil)

func queueNames(st mem.Stats) []string {
	var out []string
	for _, q := range st.Queues {
		out = append(out, fmt.Sprintf("%s|%s|%v|%s|%s|filter=%q|single=%v", q.Namespace, q.Topic, q.Mode, q.Group, q.Instance, q.KeyFilter, q.SingleActive))
	}
	return out
}
