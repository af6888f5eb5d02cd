package schedule

// Entry is one deadline in a Heap. Its fields are read-only for callers.
type Entry[V any] struct {
	// When is the deadline, in the owner's clock unit (nanoseconds).
	When int64
	// Value is what the owner scheduled.
	Value V

	index int // position in the heap; -1 once removed
}

// slot is a heap element: the ordering keys sit in the slice itself, so
// sifting compares without dereferencing entries.
type slot[V any] struct {
	when int64
	seq  uint64 // ties on when keep insertion order
	e    *Entry[V]
}

// Queued reports whether e is still in its heap.
func (e *Entry[V]) Queued() bool { return e.index >= 0 }

// Heap is the module's one timer heap: a binary min-heap of deadlines with
// O(log n) removal, under the Scheduler, the timer-driven operators and the
// Pulsar adapter's not-before hold. It orders entries by When, then by
// insertion. It is not safe for concurrent use; its owner locks or
// confines it. The zero value is empty and ready to use.
type Heap[V any] struct {
	es  []slot[V]
	seq uint64
}

// Len returns the number of entries.
func (h *Heap[V]) Len() int { return len(h.es) }

// Push adds v with deadline when and returns its entry.
func (h *Heap[V]) Push(when int64, v V) *Entry[V] {
	e := &Entry[V]{When: when, Value: v}
	h.PushEntry(e)
	return e
}

// PushEntry adds an entry the caller allocated (When and Value set).
func (h *Heap[V]) PushEntry(e *Entry[V]) {
	h.seq++
	e.index = len(h.es)
	h.es = append(h.es, slot[V]{when: e.When, seq: h.seq, e: e})
	h.up(e.index)
}

// Peek returns the earliest entry, or nil when empty.
func (h *Heap[V]) Peek() *Entry[V] {
	if len(h.es) == 0 {
		return nil
	}
	return h.es[0].e
}

// Pop removes and returns the earliest entry, or nil when empty.
func (h *Heap[V]) Pop() *Entry[V] {
	if len(h.es) == 0 {
		return nil
	}
	e := h.es[0].e
	h.Remove(e)
	return e
}

// Remove takes e out of the heap; it reports false if e was not queued.
func (h *Heap[V]) Remove(e *Entry[V]) bool {
	i := e.index
	if i < 0 || i >= len(h.es) || h.es[i].e != e {
		return false
	}
	last := len(h.es) - 1
	if i != last {
		h.swap(i, last)
	}
	h.es[last] = slot[V]{}
	h.es = h.es[:last]
	e.index = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	if cap(h.es) > 1024 && len(h.es) < cap(h.es)/4 {
		h.es = append([]slot[V](nil), h.es...) // give memory back after a burst
	}
	return true
}

// Drain removes every entry and returns them in no particular order.
func (h *Heap[V]) Drain() []*Entry[V] {
	es := make([]*Entry[V], len(h.es))
	for i, s := range h.es {
		s.e.index = -1
		es[i] = s.e
	}
	h.es = nil
	return es
}

func (h *Heap[V]) less(i, j int) bool {
	a, b := &h.es[i], &h.es[j]
	if a.when != b.when {
		return a.when < b.when
	}
	return a.seq < b.seq
}

func (h *Heap[V]) swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	h.es[i].e.index = i
	h.es[j].e.index = j
}

func (h *Heap[V]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			return
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap[V]) down(i int) bool {
	start, n := i, len(h.es)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > start
}
