package amqp

import (
	"fmt"
	"slices"
	"testing"
)

// TestTagsAckSettledPrefixWithOneMultipleAck: a round settled out of order
// is acked with one multiple ack up to the highest tag whose lower tags
// are all settled; tags settled above a gap wait for it, and no unsettled
// tag is ever acked.
func TestTagsAckSettledPrefixWithOneMultipleAck(t *testing.T) {
	var wire []string
	settled, acked := map[uint64]bool{}, map[uint64]bool{}
	tg := tags{ack: func(tag uint64, multiple bool) error {
		wire = append(wire, fmt.Sprintf("%d/%v", tag, multiple))
		for x := uint64(1); x <= tag; x++ {
			if (multiple || x == tag) && !acked[x] {
				if !settled[x] {
					t.Fatalf("ack %d/%v covers the unsettled tag %d", tag, multiple, x)
				}
				acked[x] = true
			}
		}
		return nil
	}}
	for tag := uint64(1); tag <= 8; tag++ {
		tg.add(tag)
	}
	round := func(ts ...uint64) {
		t.Helper()
		for _, x := range ts {
			settled[x] = true
		}
		if n, err := tg.settle(ts); n != 0 || err != nil {
			t.Fatalf("settle(%v) = %d, %v", ts, n, err)
		}
	}
	round(3, 2, 5) // 1 is unsettled: nothing can be acked
	if len(wire) != 0 {
		t.Fatalf("acked %v above the unsettled tag 1", wire)
	}
	if !tg.waiting() {
		t.Fatal("settled tags above the gap are not waiting")
	}
	round(1)    // 1..3 settled, 4 not
	round(6, 4) // 4..6 settled, 7 not
	if want := []string{"3/true", "6/true"}; !slices.Equal(wire, want) {
		t.Fatalf("acks %v, want %v", wire, want)
	}
	if n, _ := tg.settle([]uint64{4, 99}); n != 2 {
		t.Fatalf("settle of an acked and an unknown tag counted %d unknown, want 2", n)
	}
	round(8)
	if err := tg.flush(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"3/true", "6/true", "8/false"}; !slices.Equal(wire, want) {
		t.Fatalf("acks after flush %v, want %v", wire, want)
	}
	if len(tg.out) != 1 || tg.out[0].tag != 7 || tg.waiting() {
		t.Fatalf("left %v, want only the unsettled tag 7", tg.out)
	}
	round(7)
	if wire[len(wire)-1] != "7/true" || len(tg.out) != 0 {
		t.Fatalf("acks %v, left %v", wire, tg.out)
	}
}
