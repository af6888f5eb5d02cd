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

// RecordIdentity is a record's identity: ports.IdentityFromHeaders of
// its headers (h, or lazy when they were left in the broker's record),
// else its broker id (IDNone when it has neither).
func RecordIdentity(h ports.Headers, lazy driver.LazyHeaders, brokerID string) (string, ports.IDSource) {
	var id string
	var src ports.IDSource
	if lazy != nil {
		lid, _ := lazy.Lookup(ports.HeaderID)
		lsrc, _ := lazy.Lookup(ports.HeaderIDSource)
		id, src = ports.Identity(lid, lsrc)
	} else {
		id, src = ports.IdentityFromHeaders(h)
	}
	if id == "" && brokerID != "" {
		return brokerID, ports.IDBroker
	}
	return id, src
}

// Deferred is a delivery's headers while they are left in the broker's
// record (ports.HeaderDeferrer): the portable layer keeps one per
// delivery. The zero value holds none.
type Deferred struct {
	mu   sync.Mutex
	lazy driver.LazyHeaders // nil once loaded
}

// Identity keeps lazy (nil: the record's headers are h, none deferred)
// and returns the record's identity (RecordIdentity).
func (x *Deferred) Identity(h ports.Headers, lazy driver.LazyHeaders, brokerID string) (string, ports.IDSource) {
	x.lazy = lazy
	return RecordIdentity(h, lazy, brokerID)
}

// Load fills d.Headers from the record once; safe for concurrent use.
func (x *Deferred) Load(d *ports.Delivery) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.lazy != nil {
		d.Headers, x.lazy = x.lazy.Load(), nil
	}
}

// Lookup returns d's header name, from the record while its headers are
// left in it; safe for concurrent use.
func (x *Deferred) Lookup(d *ports.Delivery, name string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.lazy != nil {
		return x.lazy.Lookup(name)
	}
	return d.Headers.Lookup(name)
}

// DeferHeaders calls ds's DeferHeaders when it is a driver.HeaderDeferrer.
func DeferHeaders(ds driver.Subscription) {
	if hd, ok := ds.(driver.HeaderDeferrer); ok {
		hd.DeferHeaders()
	}
}
