package kit_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestCumulativeAcksSettledPrefixWithOneAck: rounds settled out of order
// are acked with one cumulative ack up to the highest tag whose lower tags
// are all settled; tags settled above a gap wait for it, and no unsettled
// tag is ever acked.
func TestCumulativeAcksSettledPrefixWithOneAck(t *testing.T) {
	var wire []string
	settled, acked := map[uint64]bool{}, map[uint64]bool{}
	a := kit.CumulativeAcks{Ack: func(tag uint64, cumulative bool) error {
		wire = append(wire, fmt.Sprintf("%d/%v", tag, cumulative))
		for x := uint64(1); x <= tag; x++ {
			if (cumulative || x == tag) && !acked[x] {
				if !settled[x] {
					t.Fatalf("ack %d/%v covers the unsettled tag %d", tag, cumulative, x)
				}
				acked[x] = true
			}
		}
		return nil
	}}
	for tag := uint64(1); tag <= 8; tag++ {
		a.Add(tag)
	}
	round := func(ready int, ts ...uint64) {
		t.Helper()
		for _, x := range ts {
			settled[x] = true
		}
		if n, r := a.Settle(ts); n != 0 || r != ready {
			t.Fatalf("Settle(%v) = %d unknown, %d ready; want 0, %d", ts, n, r, ready)
		}
	}
	ackSettled := func() {
		t.Helper()
		if err := a.AckSettled(); err != nil {
			t.Fatal(err)
		}
	}
	round(0, 3, 2, 5) // 1 is unsettled: nothing can be acked
	ackSettled()
	if len(wire) != 0 {
		t.Fatalf("acked %v above the unsettled tag 1", wire)
	}
	if !a.Waiting() {
		t.Fatal("settled tags above the gap are not waiting")
	}
	round(3, 1) // 1..3 settled, 4 not
	if len(wire) != 0 {
		t.Fatalf("Settle wrote %v: it only records", wire)
	}
	round(6, 6, 4) // 4..6 settled, 7 not
	ackSettled()   // both rounds with one ack
	if want := []string{"6/true"}; !slices.Equal(wire, want) {
		t.Fatalf("acks %v, want %v", wire, want)
	}
	if n, _ := a.Settle([]uint64{4, 99}); n != 2 {
		t.Fatalf("Settle of an acked and an unknown tag counted %d unknown, want 2", n)
	}
	round(0, 8)
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"6/true", "8/false"}; !slices.Equal(wire, want) {
		t.Fatalf("acks after Flush %v, want %v", wire, want)
	}
	if a.Out() != 1 || a.Waiting() {
		t.Fatalf("%d tags out (waiting: %v), want only the unsettled tag 7", a.Out(), a.Waiting())
	}
	round(1, 7)
	ackSettled()
	if wire[len(wire)-1] != "7/true" || a.Out() != 0 {
		t.Fatalf("acks %v, %d left", wire, a.Out())
	}
}

// TestCumulativeAcksSettleIsAllOrNone: a Settle with a tag that is
// unknown or settled already settles none of its tags, so that the
// caller, told the settlement failed, can settle the good ones again; a
// cumulative ack never covers them meanwhile.
func TestCumulativeAcksSettleIsAllOrNone(t *testing.T) {
	var wire []string
	a := kit.CumulativeAcks{Ack: func(tag uint64, cumulative bool) error {
		wire = append(wire, fmt.Sprintf("%d/%v", tag, cumulative))
		return nil
	}}
	for tag := uint64(1); tag <= 4; tag++ {
		a.Add(tag)
	}
	if n, r := a.Settle([]uint64{1, 2, 99}); n != 1 || r != 0 {
		t.Fatalf("Settle with an unknown tag = %d unknown, %d ready; want 1, 0", n, r)
	}
	if n, r := a.Settle([]uint64{3, 3}); n != 1 || r != 0 {
		t.Fatalf("Settle with a tag twice = %d unknown, %d ready; want 1, 0", n, r)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(wire) != 0 || a.Out() != 4 {
		t.Fatalf("after failed settlements: acks %v, %d tags out; want none acked, 4 out", wire, a.Out())
	}
	for _, tag := range []uint64{1, 2, 3} { // each again, singly
		if n, _ := a.Settle([]uint64{tag}); n != 0 {
			t.Fatalf("Settle(%d) after the failed settlement: %d unknown, want 0", tag, n)
		}
	}
	if n, r := a.Settle([]uint64{3, 4}); n != 1 || r != 3 {
		t.Fatalf("Settle with a tag settled already = %d unknown, %d ready; want 1, 3 (4 left unsettled)", n, r)
	}
	if err := a.AckSettled(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"3/true"}; !slices.Equal(wire, want) || a.Out() != 1 {
		t.Fatalf("acks %v with %d out, want %v and tag 4 out", wire, a.Out(), want)
	}
}
