package kit

import "sync"

// Held is a driver subscription's table of the records it holds: received
// and not settled, by the broker's key (an entry id, a receipt handle).
// The live ones are what a lease renews; Close hands every one back to the
// broker. A record whose settlement failed stays as failed: the broker
// still has it out to this consumer, but it is no longer renewed. The
// zero value is ready; it is safe for concurrent use.
type Held[K comparable, V comparable] struct {
	mu sync.Mutex
	m  map[K]heldRecord[V]
}

type heldRecord[V comparable] struct {
	v      V
	failed bool
}

// Add holds v under k. It reports false, holding nothing, when k is held
// live already: the broker handed the same record out again. A failed k
// is held anew.
func (h *Held[K, V]) Add(k K, v V) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.m[k]; ok && !r.failed {
		return false
	}
	if h.m == nil {
		h.m = map[K]heldRecord[V]{}
	}
	h.m[k] = heldRecord[V]{v: v}
	return true
}

// Settle ends the live hold of v under k: forgotten when ok, kept as
// failed otherwise. It reports whether k was held live as v; if not, it
// changes nothing.
func (h *Held[K, V]) Settle(k K, v V, ok bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, held := h.m[k]; !held || r.failed || r.v != v {
		return false
	}
	if ok {
		delete(h.m, k)
	} else {
		h.m[k] = heldRecord[V]{v: v, failed: true}
	}
	return true
}

// Keys returns the keys held live, and with failed the failed ones too.
func (h *Held[K, V]) Keys(failed bool) []K {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []K
	for k, r := range h.m {
		if failed || !r.failed {
			out = append(out, k)
		}
	}
	return out
}

// Live returns the values held live.
func (h *Held[K, V]) Live() []V {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []V
	for _, r := range h.m {
		if !r.failed {
			out = append(out, r.v)
		}
	}
	return out
}
