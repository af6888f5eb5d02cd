package kit

import (
	"sync"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// TransportHeader reports whether name is a header the portable layer
// reads and removes as a record arrives (a requeue copy's count and group,
// a delayed message's due time): a driver leaves a record's headers in
// the broker's record (driver.Record.Lazy) only when none is one.
func TransportHeader(name string) bool {
	switch name {
	case ports.HeaderRedeliveryCount, HeaderNotBefore, HeaderRequeueGroup:
		return true
	}
	return false
}

// LazyIdentity is ports.IdentityFromHeaders of headers left in the
// broker's record.
func LazyIdentity(h driver.LazyHeaders) (string, ports.IDSource) {
	id, _ := h.Lookup(ports.HeaderID)
	src, _ := h.Lookup(ports.HeaderIDSource)
	return ports.Identity(id, src)
}

// Deferred is a delivery's headers while they are left in the broker's
// record (ports.HeaderDeferrer): the portable layer keeps one per
// delivery. The zero value holds none.
type Deferred struct {
	mu   sync.Mutex
	lazy driver.LazyHeaders // nil once loaded
}

// Identity keeps lazy (nil: the record's headers are h, none deferred)
// and returns the identity of the record's headers, as
// ports.IdentityFromHeaders does.
func (x *Deferred) Identity(h ports.Headers, lazy driver.LazyHeaders) (string, ports.IDSource) {
	if x.lazy = lazy; lazy == nil {
		return ports.IdentityFromHeaders(h)
	}
	return LazyIdentity(lazy)
}

// Load fills d.Headers from the record once; safe for concurrent use.
func (x *Deferred) Load(d *ports.Delivery) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.lazy != nil {
		d.Headers, x.lazy = x.lazy.Load(), nil
	}
}

// DeferHeaders calls ds's DeferHeaders when it is a driver.HeaderDeferrer.
func DeferHeaders(ds driver.Subscription) {
	if hd, ok := ds.(driver.HeaderDeferrer); ok {
		hd.DeferHeaders()
	}
}
