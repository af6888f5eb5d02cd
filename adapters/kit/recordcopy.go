package kit

import (
	"slices"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// CopyGroup is the group a subscription of spec addresses its requeue
// copies to (AddressCopies): spec.Group or, for a broadcast, the
// instance's own group; "" for a broadcast without an Instance, a group
// of its own that nobody reads after it stops (the portable layer names
// it afresh).
func CopyGroup(spec ports.SubscriptionSpec) string {
	switch {
	case spec.Mode != ports.Broadcast:
		return spec.Group
	case spec.Instance == "":
		return ""
	}
	return spec.Group + "#" + spec.Instance
}

// RecordDelivery returns the delivery r stands for, for a driver that
// copies a record it holds (a dead letter it moves, a requeue at stop) as
// the portable layer would the delivery it made of r: r's message with
// its own headers (loaded if left in the broker's record) less the
// transport headers, a requeue copy's count added to RedeliveryCount, its
// identity (RecordIdentity), and when a delayed copy is due (zero: not
// delayed; a malformed count or due time is taken as absent).
func RecordDelivery(r *driver.Record) (*ports.Delivery, time.Time) {
	d := &ports.Delivery{Message: r.Message, RedeliveryCount: r.RedeliveryCount}
	if r.Lazy != nil {
		d.Headers = r.Lazy.Load() // a slice of its own
	} else {
		d.Headers = slices.Clone(d.Headers)
	}
	n, _ := ports.RedeliveryCountFrom(d.Headers)
	d.RedeliveryCount += n
	d.Headers.Del(ports.HeaderRedeliveryCount)
	d.Headers.Del(HeaderRequeueGroup)
	at, _ := TakeNotBefore(&d.Headers)
	d.ID, d.IDSource = RecordIdentity(d.Headers, nil, r.BrokerID)
	return d, at
}
