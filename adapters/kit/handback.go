package kit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// HandBackAfter is how long a delivery whose settlement failed stays with
// its consumer before HandBack gives it back.
const HandBackAfter = time.Second

// HandBack gives back, HandBackAfter later, the deliveries of ds whose
// settlement failed with err and that are still unsettled then (flow
// settles a failed ACK round's members again meanwhile): where the broker
// would otherwise leave them with their consumer until it stops. They are
// claimed for a requeue and passed to give, which hands them back (a
// driver's Abandoner, a native requeue, or handing them out again); they
// end settled when give returns nil, unsettled otherwise, the error going
// to OnError. With native true (give requeues natively), a delivery at
// DeliveryLimit is left alone: the broker would archive it. A failure
// wrapping driver.ErrRecordsLost or ports.ErrSettleInDoubt needs nothing:
// the broker has those records again.
func (s *Settler) HandBack(ds []*ports.Delivery, err error, native bool, give func(context.Context, []*ports.Delivery) error) {
	if errors.Is(err, driver.ErrRecordsLost) || errors.Is(err, ports.ErrSettleInDoubt) {
		return
	}
	held := make([]*ports.Delivery, 0, len(ds))
	for _, d := range ds {
		if !native || s.DeliveryLimit <= 0 || !s.reached(d) {
			held = append(held, d)
		}
	}
	time.AfterFunc(HandBackAfter, func() {
		out := held[:0]
		for _, d := range held {
			if c, err := s.Tracker.lookup(d); err == nil && c.Begin(ports.Requeue) == nil {
				out = append(out, d)
			}
		}
		if len(out) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := give(ctx, out)
		s.Tracker.end(out, err == nil)
		if err != nil && s.OnError != nil {
			s.OnError(fmt.Errorf("handing back %d message(s) whose settlement failed: %w (the broker redelivers them when its own lease ends, or after Stop)", len(out), err))
		}
	})
}
