package ports

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Registry holds an application's topics, each declared once with its
// properties (TopicSpec). Subscriptions and messages built from it carry
// the topic's properties, and a topic it does not hold is refused, so a
// typo is an error rather than a new, silent topic. It is safe for
// concurrent use.
type Registry struct {
	mu     sync.RWMutex
	topics map[Topic]TopicSpec
	order  []Topic
}

// NewRegistry returns a registry holding specs (see Add).
func NewRegistry(specs ...TopicSpec) (*Registry, error) {
	r := &Registry{topics: make(map[Topic]TopicSpec, len(specs))}
	for _, s := range specs {
		if err := r.Add(s); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add validates spec and adds it. Adding the same spec again is a no-op;
// adding a topic again with other properties fails with a
// *RedeclareError naming each difference.
func (r *Registry) Add(spec TopicSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	spec.Groups = slices.Clone(spec.Groups)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = make(map[Topic]TopicSpec)
	}
	if old, ok := r.topics[spec.Topic]; ok {
		if diffs := DiffTopicSpecs(old, spec); len(diffs) > 0 {
			return &RedeclareError{Name: string(spec.Topic), Diffs: diffs}
		}
		return nil
	}
	r.topics[spec.Topic] = spec
	r.order = append(r.order, spec.Topic)
	return nil
}

// DiffTopicSpecs lists the properties in which declared differs from
// existing, as "property: existing X, declared Y" (nil when equal). Group
// lists compare as sets. Adapters that record declarations use it too.
func DiffTopicSpecs(existing, declared TopicSpec) []string {
	var d []string
	if existing.Retention != declared.Retention {
		d = append(d, fmt.Sprintf("Retention: existing %v, declared %v", existing.Retention, declared.Retention))
	}
	if existing.MaxLength != declared.MaxLength {
		d = append(d, fmt.Sprintf("MaxLength: existing %d, declared %d", existing.MaxLength, declared.MaxLength))
	}
	if existing.NoDeadLetter != declared.NoDeadLetter {
		d = append(d, fmt.Sprintf("NoDeadLetter: existing %v, declared %v", existing.NoDeadLetter, declared.NoDeadLetter))
	}
	if existing.QoS != declared.QoS {
		d = append(d, fmt.Sprintf("QoS: existing %v, declared %v", existing.QoS, declared.QoS))
	}
	a, b := slices.Clone(existing.Groups), slices.Clone(declared.Groups)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		d = append(d, fmt.Sprintf("Groups: existing %v, declared %v", a, b))
	}
	return d
}

// Lookup returns t's spec.
func (r *Registry) Lookup(t Topic) (TopicSpec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.topics[t]
	s.Groups = slices.Clone(s.Groups)
	return s, ok
}

// Topics returns every spec in the order added.
func (r *Registry) Topics() []TopicSpec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]TopicSpec, 0, len(r.order))
	for _, t := range r.order {
		s := r.topics[t]
		s.Groups = slices.Clone(s.Groups)
		out = append(out, s)
	}
	return out
}

// Declare declares every topic on a with DeclareTopic, in the order
// added, and stops at the first error (which names the topic).
func (r *Registry) Declare(ctx context.Context, a Adapter) error {
	for _, s := range r.Topics() {
		if err := DeclareTopic(ctx, a, s); err != nil {
			return fmt.Errorf("declaring topic %q: %w", string(s.Topic), err)
		}
	}
	return nil
}

func (r *Registry) get(t Topic) (TopicSpec, error) {
	s, ok := r.Lookup(t)
	if !ok {
		return s, &ValueError{Field: "topic", Reason: fmt.Sprintf("%q is not in the registry (add it with Registry.Add, or check the name)", string(t))}
	}
	return s, nil
}

// Subscription returns a LoadBalance spec for group on t carrying t's
// properties (QoS, NoDeadLetter). Set further fields on the result.
func (r *Registry) Subscription(t Topic, group string) (SubscriptionSpec, error) {
	s, err := r.get(t)
	if err != nil {
		return SubscriptionSpec{}, err
	}
	return SubscriptionSpec{Topic: t, Group: group, QoS: s.QoS, DisableDeadLetter: s.NoDeadLetter}, nil
}

// Broadcast returns a Broadcast spec on t for instance (empty: a random
// id per Subscribe) carrying t's properties.
func (r *Registry) Broadcast(t Topic, group, instance string) (SubscriptionSpec, error) {
	spec, err := r.Subscription(t, group)
	if err != nil {
		return spec, err
	}
	spec.Mode, spec.Instance = Broadcast, instance
	return spec, nil
}

// Message returns a message to t with payload and t's QoS.
func (r *Registry) Message(t Topic, payload []byte) (Message, error) {
	s, err := r.get(t)
	if err != nil {
		return Message{}, err
	}
	return Message{Topic: t, Payload: payload, QoS: s.QoS}, nil
}

// Sender returns a Sender over s that refuses messages to topics not in
// the registry (nothing is sent when one is refused) and gives messages
// that leave QoS at its default their topic's class.
func (r *Registry) Sender(s Sender) Sender { return &registrySender{r: r, s: s} }

type registrySender struct {
	r *Registry
	s Sender
}

func (g *registrySender) Send(ctx context.Context, msgs ...Message) error {
	out := msgs
	copied := false
	for i, m := range msgs {
		spec, err := g.r.get(m.Topic)
		if err != nil {
			return &SendError{Index: i, Topic: m.Topic, Err: err}
		}
		if m.QoS == AtLeastOnce && spec.QoS != AtLeastOnce {
			if !copied {
				out, copied = slices.Clone(msgs), true
			}
			out[i].QoS = spec.QoS
		}
	}
	return g.s.Send(ctx, out...)
}
