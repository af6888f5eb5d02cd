package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

var _ tck.Topology = (*harness)(nil)

// CreateExisting creates, with sarama's admin client as a program written
// without sluice would, a topic of its own name with 3 partitions and a
// retention.ms, and returns an adapter that adopts it and a consumer group
// id of its own (Config.Existing). Unchanged compares the topic's
// partitions and explicit configs, and the cluster's topic list apart
// from sluice's own namespace, with what CreateExisting saw.
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	admin, err := sarama.NewClusterAdmin(h.b.addrs, sc)
	if err != nil {
		return tck.Existing{}, err
	}
	defer admin.Close()
	phys, gid := "legacy-"+strings.ReplaceAll(string(topic), ".", "-"), "legacy-group-"+group
	ret := "3600000"
	if err := admin.CreateTopic(phys, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1, ConfigEntries: map[string]*string{"retention.ms": &ret}}, false); err != nil {
		return tck.Existing{}, err
	}
	snapshot := func() (string, error) {
		admin, err := sarama.NewClusterAdmin(h.b.addrs, sc)
		if err != nil {
			return "", err
		}
		defer admin.Close()
		topics, err := admin.ListTopics()
		if err != nil {
			return "", err
		}
		var lines []string
		for name, d := range topics {
			if strings.HasPrefix(name, "tck.") {
				continue // sluice's own namespace
			}
			lines = append(lines, fmt.Sprintf("%s partitions=%d", name, d.NumPartitions))
		}
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: phys})
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if !e.Default {
				lines = append(lines, fmt.Sprintf("%s %s=%s", phys, e.Name, e.Value))
			}
		}
		slices.Sort(lines)
		return strings.Join(lines, "; "), nil
	}
	before, err := snapshot()
	if err != nil {
		return tck.Existing{}, err
	}
	cfg := h.b.config("tck", 2)
	cfg.Existing = &kafka.Existing{
		Topics: map[ports.Topic]string{topic: phys},
		Groups: map[kafka.ExistingGroup]string{{Topic: topic, Group: group}: gid},
	}
	a, err := kafka.New(ctx, cfg)
	if err != nil {
		return tck.Existing{}, err
	}
	return tck.Existing{
		Adapter: a,
		Names:   fmt.Sprintf("topic %s, group %s: %s", phys, gid, before),
		Publish: func(ctx context.Context, payload []byte) error {
			pc := sarama.NewConfig()
			pc.Version = sarama.V2_8_0_0
			pc.Producer.Return.Successes = true
			pc.Producer.RequiredAcks = sarama.WaitForAll
			p, err := sarama.NewSyncProducer(h.b.addrs, pc)
			if err != nil {
				return err
			}
			defer p.Close()
			_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: phys, Value: sarama.ByteEncoder(payload)})
			return err
		},
		Unchanged: func(ctx context.Context) error {
			after, err := snapshot()
			if err != nil {
				return err
			}
			if after != before {
				return fmt.Errorf("before: %s\nafter:  %s", before, after)
			}
			return nil
		},
	}, nil
}
