package tck

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(35, "RequeueStaysInItsGroup", always, caseRequeueStaysInItsGroup)
}

// 35. a requeue reaches only the group that requeued: group A requeues a
// message once and then acks it; group B (and a Broadcast instance, where
// declared) got it once and must not see the requeued copy.
func caseRequeueStaysInItsGroup(k *kit) {
	var failed atomic.Bool
	spA, spB := k.spec(), k.spec()
	spA.Group, spB.Group = k.group+"a", k.group+"b"
	a := k.consume(k.first, spA, func(context.Context, *ports.Delivery) error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("requeue once")
		}
		return nil
	})
	others := map[string]*consumer{"group B": k.consume(k.adapter(), spB, nil)}
	if k.caps.Broadcast {
		sp := k.spec()
		sp.Mode, sp.Group = ports.Broadcast, ""
		others["a Broadcast instance"] = k.consume(k.adapter(), sp, nil)
	}
	id := k.send(k.first, 1)[0]
	if r := a.next("group A's delivery"); r.d.ID != id {
		k.t.Fatalf("group A got %s, want %s", r.d.ID, id)
	}
	if r := a.next("group A's redelivery after its requeue"); r.d.ID != id || r.d.RedeliveryCount < 1 {
		k.t.Fatalf("group A's second delivery is %s with redelivery count %d, want %s with a count >= 1", r.d.ID, r.d.RedeliveryCount, id)
	}
	for who, c := range others {
		if r := c.next(who + "'s delivery"); r.d.ID != id {
			k.t.Fatalf("%s got %s, want %s", who, r.d.ID, id)
		}
	}
	a.waitStats("group A's requeue and ack", func(s flow.Stats) bool { return s.Requeued == 1 && s.Acked == 1 })
	for who, c := range others {
		c.waitStats(who+"'s ack", func(s flow.Stats) bool { return s.Acked >= 1 })
		c.quiet(who + " must not receive group A's requeued copy")
	}
	a.quiet("group A acked its redelivery")
}
