package schedule

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHeapOrdersByWhenThenInsertion(t *testing.T) {
	var h Heap[int]
	r := rand.New(rand.NewPCG(1, 2))
	var want []int64
	var es []*Entry[int]
	for i := range 1000 {
		w := r.Int64N(100)
		es = append(es, h.Push(w, i))
		want = append(want, w)
	}
	// Remove a third at random positions.
	removed := map[int]bool{}
	for i := 0; i < len(es); i += 3 {
		if !h.Remove(es[i]) {
			t.Fatalf("Remove(%d) = false for a queued entry", i)
		}
		if h.Remove(es[i]) {
			t.Fatalf("second Remove(%d) = true", i)
		}
		removed[i] = true
	}
	var got []int64
	lastSeq := map[int64]int{}
	for h.Len() > 0 {
		e := h.Pop()
		if removed[e.Value] {
			t.Fatalf("popped removed entry %d", e.Value)
		}
		if prev, ok := lastSeq[e.When]; ok && prev > e.Value {
			t.Fatalf("ties out of insertion order: %d after %d", e.Value, prev)
		}
		lastSeq[e.When] = e.Value
		got = append(got, e.When)
	}
	if !slices.IsSorted(got) || len(got) != 1000-len(removed) {
		t.Fatalf("popped %d entries, sorted=%v", len(got), slices.IsSorted(got))
	}
	_ = want
}
