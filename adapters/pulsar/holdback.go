package pulsar

import (
	"container/heap"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// holdback keeps deliveries that the broker dispatched before their
// NotBeforeProperty time, until that time. Only Receive's goroutine uses it.
type holdback struct {
	items heldHeap
	timer *time.Timer
}

type held struct {
	at time.Time
	d  *ports.Delivery
}

// push holds d until at.
func (b *holdback) push(at time.Time, d *ports.Delivery) { heap.Push(&b.items, held{at: at, d: d}) }

// len is the number of held deliveries.
func (b *holdback) len() int { return len(b.items) }

// popDue appends to out, up to max in all, the deliveries due at now.
func (b *holdback) popDue(now time.Time, out []*ports.Delivery, max int) []*ports.Delivery {
	for len(out) < max && len(b.items) > 0 && !b.items[0].at.After(now) {
		out = append(out, heap.Pop(&b.items).(held).d)
	}
	return out
}

// wait returns a channel that fires when the earliest held delivery is
// due, or nil (blocks forever in a select) when nothing is held.
func (b *holdback) wait(now time.Time) <-chan time.Time {
	if len(b.items) == 0 {
		return nil
	}
	d := b.items[0].at.Sub(now)
	if b.timer == nil {
		b.timer = time.NewTimer(d)
	} else {
		b.timer.Reset(d)
	}
	return b.timer.C
}

type heldHeap []held

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = held{}
	*h = old[:len(old)-1]
	return x
}
