package ports

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// TopicSpec declares a topic once with its properties (the design
// documents' topic registry). Zero fields mean the broker's default.
type TopicSpec struct {
	// Topic is the logical topic. Required.
	Topic Topic
	// Retention bounds how long a message waits unconsumed: older ones
	// may be dropped by the broker (RabbitMQ x-message-ttl, Kafka
	// retention.ms, MQTT 5 message expiry, mem natively). Zero keeps
	// messages until consumed. Needs Capabilities.Retention.
	Retention time.Duration
	// MaxLength caps each group's backlog at this many messages, the
	// oldest dropped first. Zero: unbounded. Needs Capabilities.MaxLength.
	MaxLength int
	// NoDeadLetter says the topic has no dead-letter topic: subscriptions
	// built from a Registry get DisableDeadLetter.
	NoDeadLetter bool
	// Groups are LoadBalance groups created with the topic, so that what is
	// published from then on is kept for each before its first consumer
	// starts (as DeclareGroup).
	Groups []string
	// QoS is the topic's delivery class; messages and subscriptions built
	// from a Registry take it. ExactlyOnce is refused.
	QoS QoS
}

// Validate reports the first problem with s, as an error wrapping
// ErrInvalid (or ErrUnsupported for QoS ExactlyOnce).
func (s TopicSpec) Validate() error {
	if err := s.Topic.Validate(); err != nil {
		return err
	}
	if s.Retention < 0 {
		return &ValueError{Field: "TopicSpec.Retention", Reason: "must not be negative"}
	}
	if s.Retention > 0 && s.Retention < time.Millisecond {
		return &ValueError{Field: "TopicSpec.Retention", Reason: fmt.Sprintf("%v is below the 1ms brokers can express", s.Retention)}
	}
	if s.MaxLength < 0 {
		return &ValueError{Field: "TopicSpec.MaxLength", Reason: "must not be negative"}
	}
	seen := make(map[string]bool, len(s.Groups))
	for _, g := range s.Groups {
		if g == "" {
			return &ValueError{Field: "TopicSpec.Groups", Reason: "holds an empty group name"}
		}
		if seen[g] {
			return &ValueError{Field: "TopicSpec.Groups", Reason: fmt.Sprintf("names group %q twice", g)}
		}
		seen[g] = true
	}
	return s.QoS.validate("TopicSpec.QoS")
}

// TopicDeclarer is implemented by adapters that create a topic's physical
// resources with its properties ahead of use.
type TopicDeclarer interface {
	// DeclareTopic creates spec's topic and groups where they do not exist
	// and is idempotent for the same spec. A property the broker cannot
	// enforce fails with ErrUnsupported (see Capabilities); a topic that
	// exists with other properties fails with a *RedeclareError and is left
	// as it is.
	DeclareTopic(ctx context.Context, spec TopicSpec) error
}

// DeclareTopic validates spec and declares it on a (or an adapter it
// wraps) when it is a TopicDeclarer. Otherwise it checks that spec asks
// for nothing the adapter's capabilities lack and declares spec.Groups
// with DeclareGroup (brokers that keep everything for every group need
// neither).
func DeclareTopic(ctx context.Context, a Adapter, spec TopicSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if a == nil {
		return &ValueError{Field: "adapter", Reason: "is nil"}
	}
	for x := a; x != nil; {
		if d, ok := x.(TopicDeclarer); ok {
			return d.DeclareTopic(ctx, spec)
		}
		w, ok := x.(interface{ Unwrap() Adapter })
		if !ok {
			break
		}
		x = w.Unwrap()
	}
	caps := a.Capabilities()
	if spec.Retention > 0 && !caps.Retention {
		return fmt.Errorf("%w: %s cannot enforce a retention of %v on topic %q", ErrUnsupported, a.Name(), spec.Retention, string(spec.Topic))
	}
	if spec.MaxLength > 0 && !caps.MaxLength {
		return fmt.Errorf("%w: %s cannot cap topic %q at %d messages", ErrUnsupported, a.Name(), string(spec.Topic), spec.MaxLength)
	}
	for _, g := range spec.Groups {
		if err := DeclareGroup(ctx, a, spec.Topic, g); err != nil {
			return err
		}
	}
	return nil
}

// RedeclareError reports a declaration that differs from what exists: the
// existing topic or queue is kept as it is, never redeclared.
type RedeclareError struct {
	// Name is the logical or physical name declared.
	Name string
	// Diffs lists each differing property as "property: existing X, declared Y".
	Diffs []string
}

func (e *RedeclareError) Error() string {
	return fmt.Sprintf("%q exists with other properties (%s): it was left as it is; declare it as it exists, or migrate it by hand", e.Name, strings.Join(e.Diffs, "; "))
}

// Is makes a RedeclareError match ErrInvalid.
func (e *RedeclareError) Is(target error) bool { return target == ErrInvalid }
