package kit_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestOffsetsMarkIsTheDonePrefix(t *testing.T) {
	o := kit.NewOffsets(10)
	o.Add(10, false)
	o.Add(12, false) // 11 was skipped by the log (compacted away)
	o.Add(13, true)
	if o.Mark() != 10 {
		t.Fatalf("nothing done: mark %d, want 10", o.Mark())
	}
	o.Done(12)
	if o.Mark() != 10 {
		t.Fatalf("10 still out: mark %d, want 10", o.Mark())
	}
	o.Done(10)
	if o.Mark() != 14 {
		t.Fatalf("all done: mark %d, want 14", o.Mark())
	}
	o.Done(10) // again, below the mark: ignored
	o.Done(99) // never added: ignored
	if o.Mark() != 14 {
		t.Fatalf("mark %d, want 14", o.Mark())
	}
}

func TestOffsetsInAnyOrder(t *testing.T) {
	o := kit.NewOffsets(0)
	const n = 1000
	for i := range n {
		o.Add(int64(i), false)
	}
	order := rand.Perm(n)
	done := make([]bool, n)
	for _, i := range order {
		o.Done(int64(i))
		done[i] = true
		want := int64(0)
		for want < n && done[want] {
			want++
		}
		if o.Mark() != want {
			t.Fatalf("mark %d, want %d", o.Mark(), want)
		}
	}
}
