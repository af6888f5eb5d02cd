package kafka

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// Existing adopts Kafka topics and consumer groups that exist already
// under their own names. An adopted topic is never created or reconfigured
// (New checks that it exists); an adopted group keeps its commits.
type Existing struct {
	// Topics maps a logical topic to its physical topic; map
	// "<topic>.dlq" too to adopt its dead-letter topic.
	Topics map[ports.Topic]string
	// Groups maps a LoadBalance group of a topic to its consumer group id.
	Groups map[ExistingGroup]string
}

// ExistingGroup names a LoadBalance group of a logical topic.
type ExistingGroup = kit.ExistingGroup

func (e *Existing) validate() error {
	if e == nil {
		return nil
	}
	return errors.Join(kafkawire.CheckTopics("kafka.Options.Existing.Topics", e.Topics),
		kit.CheckExistingGroups("kafka.Options.Existing.Groups", e.Groups))
}

func (e *Existing) adopted(phys string) bool {
	return e != nil && slices.Contains(slices.Collect(maps.Values(e.Topics)), phys)
}

func (e *Existing) check(admin sarama.ClusterAdmin) error {
	if e == nil || len(e.Topics) == 0 {
		return nil
	}
	md, err := admin.DescribeTopics(slices.Collect(maps.Values(e.Topics)))
	if err != nil {
		return fmt.Errorf("describe adopted topics: %w", err)
	}
	for _, t := range md {
		if t.Err != sarama.ErrNoError {
			return fmt.Errorf("names topic %q, which the cluster does not have (sluice never creates an adopted topic): %w", t.Name, t.Err)
		}
	}
	return nil
}

// topic is the Kafka topic of t: adopted, or kafkawire.Topic (built once
// per topic, kafkawire.Topics).
func (c *conn) topic(t ports.Topic) string {
	if e := c.opts.Existing; e != nil && e.Topics[t] != "" {
		return e.Topics[t]
	}
	return c.names.Topic(c.opts.Namespace, t)
}

// group is the consumer group of spec: adopted, or kafkawire.Group.
func (c *conn) group(spec ports.SubscriptionSpec) string {
	if e := c.opts.Existing; e != nil && spec.Mode != ports.Broadcast {
		if id := e.Groups[ExistingGroup{Topic: spec.Topic, Group: spec.Group}]; id != "" {
			return id
		}
	}
	return kafkawire.Group(c.opts.Namespace, spec)
}
