package kit_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
)

// held is a held record's handle.
type held struct {
	kit.RecordLock
	name string
}

func names(rs []*held) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	slices.Sort(out)
	return out
}

// Due returns the records whose lock ends soon, until the bound after they
// were handed out, and forgets those whose lock has ended.
func TestRenewalsDueBoundAndLapse(t *testing.T) {
	var r kit.Renewals[*held]
	a, b, c := &held{name: "a"}, &held{name: "b"}, &held{name: "c"}
	t0 := time.Unix(1000, 0)
	lock := 10 * time.Second
	for _, x := range []*held{a, b, c} {
		x.Ends(t0.Add(lock))
	}
	r.Hold(t0, a, b, c)
	r.Drop(c)
	if due, keys := r.Due(t0.Add(time.Second), lock/2, time.Minute), names(r.Keys()); len(due) != 0 || r.Len() != 2 || !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("early Due = %v, Len %d, Keys %v; want none due, a and b held", names(due), r.Len(), keys)
	}
	if !a.Held(t0.Add(lock-time.Nanosecond)) || a.Held(t0.Add(lock)) {
		t.Fatalf("a's lease: locked until %v", t0.Add(lock))
	}
	now := t0.Add(6 * time.Second)
	if due := names(r.Due(now, lock/2, time.Minute)); !slices.Equal(due, []string{"a", "b"}) {
		t.Fatalf("Due = %v, want a and b", due)
	}
	a.Ends(now.Add(lock))
	r.OutRecords(now, []driver.Record{{Handle: a}})
	// b's lock ends: forgotten. a is renewed until its bound.
	if due := r.Due(t0.Add(lock), lock/2, 10*time.Second); len(due) != 0 || r.Len() != 1 {
		t.Fatalf("Due after b lapsed = %v, Len %d; want none due, only a held", names(due), r.Len())
	}
	if due := names(r.Due(now.Add(6*time.Second), lock/2, 10*time.Second)); !slices.Equal(due, []string{"a"}) {
		t.Fatalf("Due = %v, want a (handed out 6s ago, bound 10s)", due)
	}
	if due := r.Due(now.Add(9*time.Second), lock/2, 5*time.Second); len(due) != 0 || r.Len() != 1 {
		t.Fatalf("Due past the bound = %v, Len %d; want none due, a held until its lock ends", names(due), r.Len())
	}
}

// With a negative bound nothing is due, and each record is forgotten when
// its lock ends.
func TestRenewalsNoRenewalForgetsAtLockEnd(t *testing.T) {
	var r kit.Renewals[*held]
	t0 := time.Unix(1000, 0)
	one, two := &held{name: "1"}, &held{name: "2"}
	one.Ends(t0.Add(time.Second))
	two.Ends(t0.Add(3 * time.Second))
	r.Hold(t0, one, two)
	if due := r.Due(t0.Add(900*time.Millisecond), time.Hour, -1); len(due) != 0 || r.Len() != 2 {
		t.Fatalf("Due = %v, Len %d; want none, 2 held", names(due), r.Len())
	}
	if r.Due(t0.Add(time.Second), time.Hour, -1); r.Len() != 1 {
		t.Fatalf("Len = %d after the first lock ended, want 1", r.Len())
	}
	if r.Due(t0.Add(3*time.Second), time.Hour, -1); r.Len() != 0 {
		t.Fatalf("Len = %d after every lock ended, want 0", r.Len())
	}
}

// The record forms hold and hand out the records' handles.
func TestRenewalsOfRecords(t *testing.T) {
	var r kit.Renewals[*held]
	a, b := &held{name: "a"}, &held{name: "b"}
	t0 := time.Unix(1000, 0)
	a.Ends(t0.Add(10 * time.Second))
	b.Ends(t0.Add(10 * time.Second))
	recs := []driver.Record{{Handle: a}, {Handle: b}}
	r.HoldRecords(t0, recs)
	r.OutRecords(t0.Add(5*time.Second), recs[1:])
	// a was handed out at t0, b at t0+5s: with a bound of 7s only b is due.
	if due := names(r.Due(t0.Add(8*time.Second), 5*time.Second, 7*time.Second)); !slices.Equal(due, []string{"b"}) || r.Len() != 2 {
		t.Fatalf("Due = %v, Len %d; want b, 2 held", due, r.Len())
	}
}

// The table stays exact over many holds, drops, repeated holds and lapses
// in any order.
func TestRenewalsManyHeldAndDropped(t *testing.T) {
	var r kit.Renewals[*held]
	t0 := time.Unix(1000, 0)
	hs := make([]*held, 100)
	want := map[string]bool{}
	for i := range hs {
		hs[i] = &held{name: strconv.Itoa(i)}
		hs[i].Ends(t0.Add(time.Duration(1+i%2) * time.Minute)) // odd ones last longer
	}
	r.Hold(t0, hs...)
	r.Hold(t0, hs[:10]...) // held already: once in the table
	for i, h := range hs {
		if i%3 == 0 {
			r.Drop(h)
		} else {
			want[h.name] = true
		}
	}
	r.Drop(hs[0], hs[3]) // not held any more: nothing happens
	check := func(when string) {
		t.Helper()
		keys := names(r.Keys())
		if r.Len() != len(want) || len(keys) != len(want) {
			t.Fatalf("%s: Len %d, %d keys, want %d", when, r.Len(), len(keys), len(want))
		}
		for _, k := range keys {
			if !want[k] {
				t.Fatalf("%s: %s held, want it gone", when, k)
			}
		}
	}
	check("after the drops")
	r.Hold(t0, hs[0], hs[1]) // 0 held again, 1 still held
	want[hs[0].name] = true
	check("after holding again")
	// At t0+90s the even ones' locks have ended: forgotten.
	if due := r.Due(t0.Add(90*time.Second), time.Minute, time.Hour); len(due) == 0 {
		t.Fatal("no lock due within a minute at t0+90s, want the odd ones")
	}
	for i, h := range hs {
		if i%2 == 0 {
			delete(want, h.name)
		}
	}
	check("after the lapse")
}
