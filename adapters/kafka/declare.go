package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// DeclareTopic creates the topic (retention.ms from spec.Retention) or
// checks an existing one's retention.ms (a difference is a
// *ports.RedeclareError; sluice never alters a topic), then declares
// spec.Groups. The rules are in docs/adapters/kafka.md.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, func(ctx context.Context, spec ports.TopicSpec) error {
		phys, detail, want := c.topic(spec.Topic), &sarama.TopicDetail{}, ""
		if spec.Retention > 0 {
			want = strconv.FormatInt(max(spec.Retention.Milliseconds(), 1), 10)
			detail.ConfigEntries = map[string]*string{"retention.ms": &want}
		}
		exists, err := c.createTopic(phys, detail)
		if err != nil {
			return err
		}
		if exists && want != "" {
			if got, err := c.topicRetention(phys); err != nil {
				return err
			} else if got != want {
				return &ports.RedeclareError{Name: phys, Diffs: []string{fmt.Sprintf("retention.ms: existing %s, declared %s", got, want)}}
			}
		}
		if err := c.ensureTopic(ctx, phys); err != nil {
			return err
		}
		return kit.DeclareGroups(c)(ctx, spec)
	})
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

// retention is the declared retention of topic, else its retention.ms (0:
// unlimited or unknown): a subscription skips older records.
func (c *conn) retention(topic ports.Topic, phys string) time.Duration {
	if r := c.declared.Retention(topic); r > 0 {
		return r
	}
	v, _ := c.topicRetention(phys)
	ms, _ := strconv.ParseInt(v, 10, 64)
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// DeclareGroup commits the end offset of every partition of topic the
// LoadBalance group has no commit for, so that it receives everything
// published from now on. A group with running members refuses the commit
// and is left as it is (its subscriptions pin their start offsets).
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	phys, id := c.topic(topic), c.group(ports.SubscriptionSpec{Topic: topic, Group: group})
	if err := c.ensureTopic(ctx, phys); err != nil {
		return err
	}
	parts, err := c.client.Partitions(phys)
	if err == nil {
		_, err = pinStarts(c.client, id, phys, parts, sarama.OffsetNewest, -1, "") // a commit by no member: the group is empty
	}
	switch {
	case errors.Is(err, sarama.ErrUnknownMemberId), errors.Is(err, sarama.ErrIllegalGeneration), errors.Is(err, sarama.ErrRebalanceInProgress):
		return nil // running members: see above
	case err != nil:
		return fmt.Errorf("kafka: declare group %s on %s: %w", id, phys, err)
	}
	return nil
}

// pinStarts returns group's committed position on the partitions ids of
// phys, committing the offset at (sarama.OffsetNewest or OffsetOldest)
// first where it has none, as member of generation gen.
func pinStarts(client sarama.Client, group, phys string, ids []int32, at int64, gen int32, member string) (map[int32]int64, error) {
	coord, err := client.Coordinator(group)
	if err != nil {
		return nil, err
	}
	fetched, err := coord.FetchOffset(sarama.NewOffsetFetchRequest(client.Config().Version, group, map[string][]int32{phys: ids}))
	if err != nil {
		_ = client.RefreshCoordinator(group)
		return nil, err
	}
	pos, pin := make(map[int32]int64, len(ids)), map[int32]int64{}
	for _, id := range ids {
		if b := fetched.GetBlock(phys, id); b != nil && b.Err != sarama.ErrNoError {
			return nil, b.Err
		} else if b != nil && b.Offset >= 0 {
			pos[id] = b.Offset
			continue
		}
		if pos[id], err = client.GetOffset(phys, id, at); err != nil {
			return nil, err
		}
		pin[id] = pos[id]
	}
	if len(pin) > 0 {
		err = commitOffsets(client, group, phys, gen, member, pin)
	}
	return pos, err
}

// commitOffsets commits offs (by partition) of phys for group, as member
// of generation gen, and returns why the coordinator refused any.
func commitOffsets(client sarama.Client, group, phys string, gen int32, member string, offs map[int32]int64) error {
	req := sarama.NewOffsetCommitRequest(client.Config(), group)
	req.ConsumerGroupGeneration, req.ConsumerID = gen, member
	for id, off := range offs {
		req.AddBlock(phys, id, off, 0, "")
	}
	coord, err := client.Coordinator(group)
	var resp *sarama.OffsetCommitResponse
	if err == nil {
		resp, err = coord.CommitOffset(req)
	}
	if err != nil {
		_ = client.RefreshCoordinator(group)
		return err
	}
	var errs []error
	for id, kerr := range resp.Errors[phys] {
		if kerr != sarama.ErrNoError {
			errs = append(errs, fmt.Errorf("%s/%d: %w", phys, id, kerr))
		}
	}
	return errors.Join(errs...)
}

// checkInstanceFree refuses a Broadcast Instance whose group has members
// (detection, not exclusion: see docs/adapters/kafka.md).
func (c *conn) checkInstanceFree(spec ports.SubscriptionSpec, group string) error {
	if spec.Mode != ports.Broadcast || spec.Instance == "" {
		return nil
	}
	descs, err := c.admin.DescribeConsumerGroups([]string{group})
	for _, d := range descs {
		if err == nil && d.Err != sarama.ErrNoError && !errors.Is(d.Err, sarama.ErrGroupIDNotFound) {
			err = d.Err
		} else if err == nil && len(d.Members) > 0 {
			return &ports.InstanceSharedError{Instance: spec.Instance, Where: fmt.Sprintf(
				"its consumer group %s has %d member(s), state %s; a crashed process's member leaves when its session times out (Options.SessionTimeout %v)",
				group, len(d.Members), d.State, c.opts.SessionTimeout)}
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: describe consumer group %s (to check that Broadcast instance %q is not running elsewhere): %w", group, spec.Instance, err)
	}
	return nil
}
