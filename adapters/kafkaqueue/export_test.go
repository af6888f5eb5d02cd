package kafkaqueue

import (
	"context"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// Kill closes the adapter's client as a crash would: no share session is
// closed and the group is not left; the broker sees the connections drop.
func Kill(a *Adapter) { a.c.cl.Close() }

// DriverSubscribe subscribes below the portable layer.
func DriverSubscribe(ctx context.Context, a *Adapter, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	return a.c.Subscribe(ctx, spec)
}

// Held counts the records s holds acquired and not settled.
func Held(s driver.Subscription) int { return s.(*sub).held.Len() }
