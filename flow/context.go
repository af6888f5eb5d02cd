package flow

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

type requestIDKey struct{}
type tenantIDKey struct{}
type deliveryKey struct{}
type deliveryCtxKey struct{} // a handler's context itself (causeOf)

// WithRequestID returns ctx carrying a request id. Messages built from ctx
// (NewMessage, Send) carry it in ports.HeaderRequestID, and the consumer's
// handler finds it again with RequestID.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id in ctx, or "".
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}

// WithTenantID returns ctx carrying a tenant id (ports.HeaderTenantID).
func WithTenantID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, tenantIDKey{}, id)
}

// TenantID returns the tenant id in ctx, or "".
func TenantID(ctx context.Context) string {
	s, _ := ctx.Value(tenantIDKey{}).(string)
	return s
}

// DeliveryFrom returns the delivery a handler's ctx belongs to, or nil.
// The delivery is then the caller's to keep: the pipeline never reuses it
// for another message (see docs/settlement.md, "Reused deliveries"). Once
// the delivery of a context was reused, DeliveryFrom returns nil.
func DeliveryFrom(ctx context.Context) *ports.Delivery {
	d, _ := ctx.Value(deliveryKey{}).(*ports.Delivery)
	return d
}

// deliveryCtx is an item's context: it answers the request id, tenant id
// and delivery keys from the delivery's headers. Contexts are carved from
// chunks shared by consecutive deliveries and never reused, so that a
// handler may keep one. Once its delivery is recycled (see recycle) it
// answers those keys no more (DeliveryFrom gives nil, the ids are ""); a
// delivery whose context gave it away (DeliveryFrom) is never recycled.
type deliveryCtx struct {
	context.Context
	d     *ports.Delivery
	p     *Pipeline    // its headers' loader, when they are deferred
	state atomic.Int32 // ctxLive, ctxReading, ctxKept or ctxRecycled
}

const (
	ctxLive     int32 = iota // the delivery may be recycled once acknowledged
	ctxReading               // Value is reading the delivery's headers
	ctxKept                  // DeliveryFrom gave the delivery away: never recycled
	ctxRecycled              // the delivery is reused for another message: not read
)

func (c *deliveryCtx) Value(key any) any {
	switch key.(type) {
	case requestIDKey:
		if v := c.header(ports.HeaderRequestID); v != "" {
			return v
		}
	case tenantIDKey:
		if v := c.header(ports.HeaderTenantID); v != "" {
			return v
		}
	case deliveryKey:
		if c.keep() {
			return c.d
		}
		return nil
	case deliveryCtxKey:
		return c
	}
	return c.Context.Value(key)
}

// header returns the delivery's header name, "" once it was recycled.
func (c *deliveryCtx) header(name string) string {
	_, v, _ := c.read(name)
	return v
}

// read returns the delivery's ID and its header name, and false once it
// was recycled. A read holds off recycling while it lasts, without
// keeping the delivery (as DeliveryFrom does).
func (c *deliveryCtx) read(name string) (id, value string, ok bool) {
	if !c.claim(ctxReading) {
		return "", "", false
	}
	if c.p != nil && c.p.lookup != nil {
		value, _ = c.p.lookup.LookupHeader(c.d, name) // the others left where they are
	} else {
		c.load()
		value = c.d.Headers.Get(name)
	}
	id = c.d.ID
	c.state.CompareAndSwap(ctxReading, ctxLive) // a kept one stays kept
	return id, value, true
}

// causeOf returns the ID and the correlation id of the delivery a
// handler's ctx belongs to, and false when ctx is none's (or its delivery
// was recycled): what a message built from ctx inherits, read without
// keeping the delivery from reuse.
func causeOf(ctx context.Context) (id, correlation string, ok bool) {
	c, _ := ctx.Value(deliveryCtxKey{}).(*deliveryCtx)
	if c == nil {
		return "", "", false
	}
	return c.read(ports.HeaderCorrelationID)
}

// keep marks the delivery given away, never to be recycled, with its
// headers loaded, and reports whether it is still this context's (false
// once recycled).
func (c *deliveryCtx) keep() bool {
	if !c.claim(ctxReading) {
		return false
	}
	c.load()
	c.state.Store(ctxKept) // from reading, or kept already
	return true
}

// load fills in the delivery's headers where the subscription deferred
// them (ports.HeaderDeferrer); the context is claimed.
func (c *deliveryCtx) load() {
	if c.p != nil && c.p.headers != nil {
		c.p.headers.LoadHeaders(c.d)
	}
}

// claim moves a live context to state (ctxReading or ctxKept) and reports
// whether its delivery may be read: true when it was live or kept, false
// once recycled. It waits out another goroutine's read.
func (c *deliveryCtx) claim(state int32) bool {
	for {
		switch c.state.Load() {
		case ctxKept:
			return true
		case ctxRecycled:
			return false
		case ctxLive:
			if c.state.CompareAndSwap(ctxLive, state) {
				return true
			}
		default: // another goroutine is reading it
			runtime.Gosched()
		}
	}
}

// release claims the delivery for recycling: false when the context gave
// it away or is reading it.
func (c *deliveryCtx) release() bool { return c.state.CompareAndSwap(ctxLive, ctxRecycled) }
