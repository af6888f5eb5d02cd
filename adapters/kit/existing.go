package kit

import (
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// ExistingGroup names a LoadBalance group of a logical topic: the key of
// the map with which an adapter's Options.Existing adopts consumer groups
// or queues that exist already under their own names. An adapter exports
// it under its own name (type ExistingGroup = kit.ExistingGroup).
type ExistingGroup struct {
	Topic ports.Topic
	Group string
}

// CheckExistingNames validates a map adopting physical names (streams,
// topics) for logical topics: every topic valid and mapped to a name. A
// malformed entry is a *ports.ValueError for field (the map's option, e.g.
// "redis.Options.Existing.Streams").
func CheckExistingNames(field string, names map[ports.Topic]string) error {
	for t, name := range names {
		if t.Validate() != nil || name == "" {
			return &ports.ValueError{Field: field, Reason: fmt.Sprintf("%q → %q needs a valid topic and a name", string(t), name)}
		}
	}
	return nil
}

// CheckExistingGroups validates a map adopting groups: every key with a
// valid topic and a group, mapped to a name. A malformed entry is a
// *ports.ValueError for field (e.g. "redis.Options.Existing.Groups").
func CheckExistingGroups(field string, groups map[ExistingGroup]string) error {
	for g, name := range groups {
		if g.Topic.Validate() != nil || g.Group == "" || name == "" {
			return &ports.ValueError{Field: field, Reason: fmt.Sprintf("%q/%q → %q needs a valid topic, a group and a group name", string(g.Topic), g.Group, name)}
		}
	}
	return nil
}

// Invalid returns the constructor of a driver's *ports.ValueError for the
// fields under prefix ("amqp.Options."): the reason is formatted with args
// when there are any.
func Invalid(prefix string) func(field, reason string, args ...any) error {
	return func(field, reason string, args ...any) error {
		if len(args) > 0 {
			reason = fmt.Sprintf(reason, args...)
		}
		return &ports.ValueError{Field: prefix + field, Reason: reason}
	}
}
