package kafkaqueue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kafkaqueue"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// TestTCK runs the whole contract kit against an in-process kfake cluster
// serving share groups (a Kafka wire-protocol peer, not Apache Kafka).
func TestTCK(t *testing.T) {
	t.Log("TCK against kfake: a Kafka wire-protocol peer with KIP-932 share groups, not Apache Kafka")
	tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		return &harness{b: newBroker(t, 1)}, nil
	})
}

// harness makes adapters on one kfake cluster, with fault injection.
type harness struct{ b *broker }

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
	_ tck.ForeignProducer  = (*harness)(nil)
	_ tck.Topology         = (*harness)(nil)
)

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return kafkaqueue.New(ctx, h.b.options("tck", 2))
}

func (h *harness) Close() {
	h.FailDeadLetters(false)
	h.FailSends(false)
}

// FailDeadLetters makes kfake refuse every produce to a ".dlq" topic that
// exists now (franz-go names a produce's topics by id, so the ids are
// looked up first).
func (h *harness) FailDeadLetters(fail bool) {
	ids := map[[16]byte]bool{}
	if fail {
		cl, err := kgo.NewClient(kgo.SeedBrokers(h.b.addrs...))
		if err != nil {
			panic(err)
		}
		defer cl.Close()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl)
		if err != nil {
			panic(fmt.Sprintf("kfake metadata: %v", err))
		}
		for _, t := range resp.Topics {
			if strings.HasSuffix(*t.Topic, ".dlq") {
				ids[t.TopicID] = true
			}
		}
	}
	h.b.fail("dlq", fail, func(req kmsg.Request) bool {
		return slices.ContainsFunc(req.(*kmsg.ProduceRequest).Topics, func(t kmsg.ProduceRequestTopic) bool { return strings.HasSuffix(t.Topic, ".dlq") || ids[t.TopicID] })
	})
}

// FailSends makes kfake refuse every produce.
func (h *harness) FailSends(fail bool) { h.b.fail("sends", fail, nil) }

// PublishForeign writes the body alone with franz-go, as a producer
// without sluice does. Kafka has no message-id field: the identity is the
// broker's topic/partition/offset.
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.b.addrs...))
	if err != nil {
		return ports.IDNone, err
	}
	defer cl.Close()
	return ports.IDBroker, cl.ProduceSync(ctx, &kgo.Record{Topic: physical("tck", topic), Value: m.Body}).FirstErr()
}

// physical is the Kafka topic of t under ns (no '_' in the tests' names).
func physical(ns string, t ports.Topic) string { return ns + "." + t.Physical("..") }

// CreateExisting creates, with franz-go as a program without sluice
// would, a topic of its own name with 3 partitions and returns an adapter
// that adopts it and a share group of its own name. Unchanged compares the
// cluster's topics outside sluice's namespace and their partition counts.
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.b.addrs...))
	if err != nil {
		return tck.Existing{}, err
	}
	phys, gid := "legacy-"+strings.ReplaceAll(string(topic), ".", "-"), "legacy-share-"+group
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = phys, 3, 1
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		cl.Close()
		return tck.Existing{}, err
	}
	snapshot := func(ctx context.Context) (string, error) {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			return "", err
		}
		var lines []string
		for _, t := range resp.Topics {
			if name := *t.Topic; !strings.HasPrefix(name, "tck.") {
				lines = append(lines, fmt.Sprintf("%s partitions=%d", name, len(t.Partitions)))
			}
		}
		slices.Sort(lines)
		return strings.Join(lines, "; "), nil
	}
	before, err := snapshot(ctx)
	if err != nil {
		cl.Close()
		return tck.Existing{}, err
	}
	o := h.b.options("tck", 2)
	o.Existing = &kafkaqueue.Existing{Topics: map[ports.Topic]string{topic: phys}, Groups: map[string]string{group: gid}}
	a, err := kafkaqueue.New(ctx, o)
	if err != nil {
		cl.Close()
		return tck.Existing{}, err
	}
	return tck.Existing{
		Adapter: closing{a, cl},
		Names:   fmt.Sprintf("topic %s, share group %s: %s", phys, gid, before),
		Publish: func(ctx context.Context, payload []byte) error {
			return cl.ProduceSync(ctx, &kgo.Record{Topic: phys, Value: payload}).FirstErr()
		},
		Unchanged: func(ctx context.Context) error {
			after, err := snapshot(ctx)
			if err == nil && after != before {
				err = fmt.Errorf("before: %s\nafter:  %s", before, after)
			}
			return err
		},
	}, nil
}

// closing closes the harness's own client with the adapter.
type closing struct {
	*kafkaqueue.Adapter
	cl *kgo.Client
}

func (c closing) Close(ctx context.Context) error {
	defer c.cl.Close()
	return c.Adapter.Close(ctx)
}
