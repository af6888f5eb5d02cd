package kit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Declared is the one in-process record of the topics an adapter declared
// (ports.TopicSpec), for adapters whose broker cannot store a topic's
// properties itself (an MQTT broker, STOMP destinations, Redis streams):
// the adapter's DeclareTopic goes through [Declared.Declare], which refuses
// a declaration that differs from the recorded one with a
// *ports.RedeclareError built by ports.DiffTopicSpecs and leaves the record
// and the broker as they are, and Send looks up the topic's retention or
// class with [Declared.Retention] and [Declared.QoS].
//
// The record is per adapter value, so per process: a second process that
// declares the same topic differently is not refused by it. Brokers that
// store properties (RabbitMQ queue arguments, Kafka topic configs) compare
// against the broker instead.
//
// The zero value is ready to use. It is safe for concurrent use.
type Declared struct {
	declMu sync.Mutex // serialises Declare, create included
	mu     sync.RWMutex
	topics map[ports.Topic]ports.TopicSpec
}

// Declare validates spec and records it. A topic recorded with the same
// properties is a no-op (create is not called again); one recorded with
// other properties fails with a *ports.RedeclareError naming each
// difference and changes nothing. Otherwise create, when not nil, makes
// the topic's physical resources (groups declared ahead, a stream, a
// retention policy); spec is recorded only when it returns nil, so a
// failed creation can be declared again. Declarations run one at a time.
func (d *Declared) Declare(ctx context.Context, spec ports.TopicSpec, create func(context.Context, ports.TopicSpec) error) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	spec.Groups = slices.Clone(spec.Groups)
	d.declMu.Lock()
	defer d.declMu.Unlock()
	if old, ok := d.Lookup(spec.Topic); ok {
		if diffs := ports.DiffTopicSpecs(old, spec); len(diffs) > 0 {
			return &ports.RedeclareError{Name: string(spec.Topic), Diffs: diffs}
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if create != nil {
		if err := create(ctx, spec); err != nil {
			return err
		}
	}
	d.mu.Lock()
	if d.topics == nil {
		d.topics = make(map[ports.Topic]ports.TopicSpec)
	}
	d.topics[spec.Topic] = spec
	d.mu.Unlock()
	return nil
}

// Lookup returns the recorded spec of t.
func (d *Declared) Lookup(t ports.Topic) (ports.TopicSpec, bool) {
	d.mu.RLock()
	s, ok := d.topics[t]
	d.mu.RUnlock()
	s.Groups = slices.Clone(s.Groups)
	return s, ok
}

// Retention returns t's declared retention (0: none declared, or t not
// declared).
func (d *Declared) Retention(t ports.Topic) time.Duration {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.topics[t].Retention
}

// QoS returns the class of a message m to send: m.QoS when it is set
// (not AtLeastOnce), otherwise its topic's declared class (AtLeastOnce
// when the topic was not declared).
func (d *Declared) QoS(m *ports.Message) ports.QoS {
	if m.QoS != ports.AtLeastOnce {
		return m.QoS
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.topics[m.Topic].QoS
}

// Topics returns every recorded spec, sorted by topic.
func (d *Declared) Topics() []ports.TopicSpec {
	d.mu.RLock()
	out := make([]ports.TopicSpec, 0, len(d.topics))
	for _, s := range d.topics {
		s.Groups = slices.Clone(s.Groups)
		out = append(out, s)
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b ports.TopicSpec) int {
		switch {
		case a.Topic < b.Topic:
			return -1
		case a.Topic > b.Topic:
			return 1
		}
		return 0
	})
	return out
}

// Unsupported returns an error wrapping ports.ErrUnsupported, naming the
// adapter, when spec asks for a property caps does not declare (Retention,
// MaxLength), and nil otherwise. An adapter's DeclareTopic calls it before
// creating anything, as ports.DeclareTopic does for adapters that are not
// TopicDeclarers.
func Unsupported(adapter string, caps ports.Capabilities, spec ports.TopicSpec) error {
	if spec.Retention > 0 && !caps.Retention {
		return fmt.Errorf("%w: %s cannot enforce a retention of %v on topic %q", ports.ErrUnsupported, adapter, spec.Retention, string(spec.Topic))
	}
	if spec.MaxLength > 0 && !caps.MaxLength {
		return fmt.Errorf("%w: %s cannot cap topic %q at %d messages", ports.ErrUnsupported, adapter, string(spec.Topic), spec.MaxLength)
	}
	return nil
}

// DeclareGroups returns a create function for Declared.Declare that
// declares each of the spec's groups ahead with d, stopping at the first
// error: the whole of DeclareTopic for a broker whose topics need nothing
// created beyond their groups.
func DeclareGroups(d ports.GroupDeclarer) func(context.Context, ports.TopicSpec) error {
	return func(ctx context.Context, spec ports.TopicSpec) error {
		for _, g := range spec.Groups {
			if err := d.DeclareGroup(ctx, spec.Topic, g); err != nil {
				return err
			}
		}
		return nil
	}
}
