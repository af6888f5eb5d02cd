package mem

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRingMatchesSliceModel drives the ring buffer with random pushes at
// both ends and pops, through several growths and wrap-arounds, and
// checks it against a plain slice after every step.
func TestRingMatchesSliceModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r ring[int]
	var model []int
	for step := range 20_000 {
		switch op := rng.IntN(10); {
		case op < 4:
			r.PushBack(step)
			model = append(model, step)
		case op < 6:
			r.PushFront(step)
			model = slices.Insert(model, 0, step)
		default:
			if r.Len() != len(model) {
				t.Fatalf("step %d: Len = %d with %d in the model", step, r.Len(), len(model))
			}
			if len(model) > 0 {
				if v := r.PopFront(); v != model[0] {
					t.Fatalf("step %d: PopFront = %d, want %d", step, v, model[0])
				}
				model = model[1:]
			}
		}
		if r.Len() != len(model) {
			t.Fatalf("step %d: Len = %d, want %d", step, r.Len(), len(model))
		}
	}
}

// TestRingShrinksAfterABurst checks that a drained burst releases its
// buffer beyond keepSlots and that order survives the shrinks.
func TestRingShrinksAfterABurst(t *testing.T) {
	var r ring[int]
	const burst = 100_000
	for i := range burst {
		r.PushBack(i)
	}
	peak := len(r.buf)
	for i := range burst - 10 {
		if v := r.PopFront(); v != i {
			t.Fatalf("PopFront = %d, want %d", v, i)
		}
	}
	if len(r.buf) > keepSlots {
		t.Fatalf("buffer of %d slots kept for %d elements (peak %d)", len(r.buf), r.Len(), peak)
	}
	for i := burst - 10; i < burst; i++ {
		if v := r.PopFront(); v != i {
			t.Fatalf("after shrinking, PopFront = %d, want %d", v, i)
		}
	}
}
