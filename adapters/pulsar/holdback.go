package pulsar

import (
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// holdback keeps deliveries that the broker dispatched before their
// NotBeforeProperty time, until that time. Only Receive's goroutine uses it.
type holdback struct {
	items schedule.Heap[*ports.Delivery]
	timer *time.Timer
}

// push holds d until at.
func (b *holdback) push(at time.Time, d *ports.Delivery) { b.items.Push(at.UnixNano(), d) }

// len is the number of held deliveries.
func (b *holdback) len() int { return b.items.Len() }

// popDue appends to out, up to max in all, the deliveries due at now.
func (b *holdback) popDue(now time.Time, out []*ports.Delivery, max int) []*ports.Delivery {
	for len(out) < max && b.items.Len() > 0 && b.items.Peek().When <= now.UnixNano() {
		out = append(out, b.items.Pop().Value)
	}
	return out
}

// wait returns a channel that fires when the earliest held delivery is
// due, or nil (blocks forever in a select) when nothing is held.
func (b *holdback) wait(now time.Time) <-chan time.Time {
	if b.items.Len() == 0 {
		return nil
	}
	d := time.Duration(b.items.Peek().When - now.UnixNano())
	if b.timer == nil {
		b.timer = time.NewTimer(d)
	} else {
		b.timer.Reset(d)
	}
	return b.timer.C
}
