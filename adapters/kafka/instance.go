package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// checkInstanceFree refuses a Broadcast subscription whose Instance is
// already running: its consumer group ("<ns>.<group>.bcast.<instance>")
// has members. Kafka has no lock on a group, so this is detection, not
// exclusion: two subscriptions that join the group at the same moment can
// both pass (they then split the instance's partitions). A member of a
// crashed process stays in the group until its session times out, so a
// restarted instance may be refused for that long. An Instance left empty
// (a random one) is not checked.
func (c *conn) checkInstanceFree(spec ports.SubscriptionSpec, group string) error {
	if spec.Mode != ports.Broadcast || spec.Instance == "" {
		return nil
	}
	descs, err := c.admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return fmt.Errorf("kafka: describe consumer group %s (to check that Broadcast instance %q is not running elsewhere): %w", group, spec.Instance, err)
	}
	for _, d := range descs {
		if kerr := d.Err; kerr != sarama.ErrNoError && !errors.Is(kerr, sarama.ErrGroupIDNotFound) {
			return fmt.Errorf("kafka: describe consumer group %s (to check that Broadcast instance %q is not running elsewhere): %w", group, spec.Instance, kerr)
		}
		if len(d.Members) > 0 {
			return &ports.InstanceSharedError{Instance: spec.Instance, Where: fmt.Sprintf(
				"its consumer group %s has %d member(s), state %s; a crashed process's member leaves when its session times out (Options.SessionTimeout %v)",
				group, len(d.Members), d.State, c.opts.SessionTimeout)}
		}
	}
	return nil
}
