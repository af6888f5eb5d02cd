package kit

import "testing"

func TestCarveSharesAChunkAndNeverOverlaps(t *testing.T) {
	var slab []int
	a := Carve(&slab, 2, 4)
	b := Carve(&slab, 2, 4)
	a[0], a[1], b[0], b[1] = 1, 2, 3, 4
	if &a[0] == &b[0] || cap(a) != 2 || len(slab) != 0 {
		t.Fatalf("a %v b %v, slab left %d", a, b, len(slab))
	}
	a = append(a, 9) // past its capacity: a copy, b untouched
	if b[0] != 3 {
		t.Fatalf("appending to one carved slice wrote into the next: %v", b)
	}
	big := Carve(&slab, 6, 4) // more than a chunk: a slab of its own size
	if len(big) != 6 || len(slab) != 0 {
		t.Fatalf("carved %d, slab left %d, want 6 and 0", len(big), len(slab))
	}
	if allocs := testing.AllocsPerRun(100, func() { slab = slab[:0]; Carve(&slab, 1, 32) }); allocs != 1 {
		t.Fatalf("%v allocations for an empty slab, want 1", allocs)
	}
}
