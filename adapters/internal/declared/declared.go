// Package declared is a stand-in for adapters/kit's record of declared
// topics (kit.Declared, being written on another branch): it is replaced
// by it at merge. Adapters whose broker cannot store a topic's properties
// record them here, refuse a different redeclaration with a
// *ports.RedeclareError and look up a topic's retention at send.
package declared

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Topics records declared topics. The zero value is ready; it is safe for
// concurrent use.
type Topics struct {
	mu sync.RWMutex
	m  map[ports.Topic]ports.TopicSpec
}

// Declare records spec, or refuses it with a *ports.RedeclareError when
// its topic was declared with other properties (the record is kept).
func (d *Topics) Declare(spec ports.TopicSpec) error {
	spec.Groups = slices.Clone(spec.Groups)
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.m[spec.Topic]; ok {
		if diffs := ports.DiffTopicSpecs(old, spec); len(diffs) > 0 {
			return &ports.RedeclareError{Name: string(spec.Topic), Diffs: diffs}
		}
		return nil
	}
	if d.m == nil {
		d.m = map[ports.Topic]ports.TopicSpec{}
	}
	d.m[spec.Topic] = spec
	return nil
}

// Lookup returns t's declared spec.
func (d *Topics) Lookup(t ports.Topic) (ports.TopicSpec, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	s, ok := d.m[t]
	return s, ok
}

// Retention returns t's declared retention (0: none declared).
func (d *Topics) Retention(t ports.Topic) time.Duration {
	s, _ := d.Lookup(t)
	return s.Retention
}
