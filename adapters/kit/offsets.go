package kit

import (
	"cmp"
	"slices"
)

// Offsets is the gap-free commit position of one ordered log (a Kafka
// partition, a queue with offsets): offsets are added in increasing order
// as they are fetched and done in any order, and Mark is the offset after
// the longest done prefix, so committing it never skips an offset still
// out. Not safe for concurrent use.
type Offsets struct {
	log  []offsetEntry // log[head:] is live
	head int
	mark int64
}

type offsetEntry struct {
	off  int64
	done bool
}

// NewOffsets returns Offsets whose Mark is mark until an offset is done.
func NewOffsets(mark int64) Offsets { return Offsets{mark: mark} }

// Add appends a fetched offset, larger than every one added before, done
// at once when done is true.
func (o *Offsets) Add(off int64, done bool) {
	o.log = append(o.log, offsetEntry{off, done})
	if done {
		o.advance()
	}
}

// Done marks off done; an offset that was not added, or is below Mark, is
// ignored.
func (o *Offsets) Done(off int64) {
	live := o.log[o.head:]
	if len(live) == 0 || off < live[0].off {
		return
	}
	i, ok := int(off-live[0].off), false // where it is when the offsets have no gap, as they mostly have
	if ok = i < len(live) && live[i].off == off; !ok {
		i, ok = slices.BinarySearchFunc(live, off, func(e offsetEntry, off int64) int { return cmp.Compare(e.off, off) })
	}
	if ok {
		live[i].done = true
		o.advance()
	}
}

// Mark is the commit position: every added offset below it is done.
func (o *Offsets) Mark() int64 { return o.mark }

func (o *Offsets) advance() {
	for o.head < len(o.log) && o.log[o.head].done {
		o.mark = o.log[o.head].off + 1
		o.head++
	}
	if o.head > 64 && o.head*2 > len(o.log) {
		n := copy(o.log, o.log[o.head:])
		o.log, o.head = o.log[:n], 0
	}
}
