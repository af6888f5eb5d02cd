package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// DeclareTopic implements ports.TopicDeclarer. It creates the topic with
// Options.Partitions and Options.ReplicationFactor and, when spec has a
// Retention, the topic config retention.ms; a topic that exists (made by
// another process, or adopted with Options.Existing) is described instead,
// and one whose retention.ms differs from spec.Retention fails with a
// *ports.RedeclareError naming it and is left as it is (sluice never
// alters a topic's config). Then each of spec.Groups is declared
// (DeclareGroup). MaxLength is refused with ErrUnsupported: Kafka caps a
// partition by bytes and time, not by a message count. Declaring the same
// spec again on this adapter is a no-op; other properties fail with a
// *ports.RedeclareError before anything is sent to the cluster.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, c.createTopic)
}

func (c *conn) createTopic(ctx context.Context, spec ports.TopicSpec) error {
	phys := c.names.topic(spec.Topic)
	detail := &sarama.TopicDetail{NumPartitions: c.opts.Partitions, ReplicationFactor: c.opts.ReplicationFactor}
	want := ""
	if spec.Retention > 0 {
		want = strconv.FormatInt(max(spec.Retention.Milliseconds(), 1), 10)
		detail.ConfigEntries = map[string]*string{"retention.ms": &want}
	}
	exists := c.opts.NoCreateTopics || c.opts.Existing.adopted(phys)
	if !exists {
		err := c.admin.CreateTopic(phys, detail, false)
		switch {
		case err == nil:
		case errors.Is(err, sarama.ErrTopicAlreadyExists):
			exists = true
		default:
			return fmt.Errorf("kafka: create topic %s: %w", phys, err)
		}
	}
	if exists && want != "" {
		got, err := c.topicRetention(phys)
		if err != nil {
			return err
		}
		if got != want {
			return &ports.RedeclareError{Name: phys, Diffs: []string{fmt.Sprintf("retention.ms: existing %s, declared %s", got, want)}}
		}
	}
	if err := c.ensureTopic(ctx, phys); err != nil {
		return err
	}
	for _, g := range spec.Groups {
		if err := c.DeclareGroup(ctx, spec.Topic, g); err != nil {
			return err
		}
	}
	return nil
}

// topicRetention returns phys's retention.ms as the cluster reports it.
func (c *conn) topicRetention(phys string) (string, error) {
	entries, err := c.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: phys, ConfigNames: []string{"retention.ms"}})
	if err != nil {
		return "", fmt.Errorf("kafka: describe config of topic %s: %w", phys, err)
	}
	for _, e := range entries {
		if e.Name == "retention.ms" {
			return e.Value, nil
		}
	}
	return "", fmt.Errorf("kafka: topic %s reports no retention.ms", phys)
}

// retention is what a subscription of topic skips records older than:
// the retention declared on this adapter, else the topic's retention.ms
// (0 when unlimited or unknown).
func (c *conn) retention(topic ports.Topic, phys string) time.Duration {
	if r := c.declared.Retention(topic); r > 0 {
		return r
	}
	v, err := c.topicRetention(phys)
	if err != nil {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// DeclareGroup implements ports.GroupDeclarer: it commits, for the
// LoadBalance group of topic, the current end offset of every partition
// the group has no commit for, so that the group's first consumer starts
// there and receives everything published from now on. Partitions with a
// commit are left as they are; declaring again is a no-op. A group with
// running members (on other topics: Kafka groups span topics) refuses a
// commit from outside; it is left as it is, and its first subscription to
// topic pins the start offsets itself (Options.StartFrom).
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	phys, id := c.names.topic(topic), c.names.group(spec, "")
	if err := c.ensureTopic(ctx, phys); err != nil {
		return err
	}
	parts, err := c.client.Partitions(phys)
	if err != nil {
		return fmt.Errorf("kafka: declare group %s: partitions of %s: %w", id, phys, err)
	}
	coord, err := c.client.Coordinator(id)
	if err != nil {
		return fmt.Errorf("kafka: declare group %s: coordinator: %w", id, err)
	}
	conf := c.opts.config("consumer", 1)
	fetch := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: id}
	for _, p := range parts {
		fetch.AddPartition(phys, p)
	}
	fr, err := coord.FetchOffset(fetch)
	if err != nil {
		_ = c.client.RefreshCoordinator(id)
		return fmt.Errorf("kafka: declare group %s: fetch offsets: %w", id, err)
	}
	req := sarama.NewOffsetCommitRequest(conf, id)
	req.ConsumerGroupGeneration = -1 // a commit by no member: the group is empty
	n := 0
	for _, p := range parts {
		if b := fr.GetBlock(phys, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
			continue
		}
		end, err := c.client.GetOffset(phys, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("kafka: declare group %s: end of %s/%d: %w", id, phys, p, err)
		}
		req.AddBlock(phys, p, end, 0, "")
		n++
	}
	if n == 0 {
		return nil
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		_ = c.client.RefreshCoordinator(id)
		return fmt.Errorf("kafka: declare group %s: commit: %w", id, err)
	}
	for _, m := range resp.Errors {
		for p, kerr := range m {
			switch kerr {
			case sarama.ErrNoError:
			case sarama.ErrUnknownMemberId, sarama.ErrIllegalGeneration, sarama.ErrRebalanceInProgress:
				return nil // running members: see above
			default:
				return fmt.Errorf("kafka: declare group %s: commit %s/%d: %w", id, phys, p, kerr)
			}
		}
	}
	return nil
}
