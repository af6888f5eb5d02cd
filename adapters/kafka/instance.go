package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

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
