package flow

import (
	"context"

	"github.com/sluicemq/sluice/ports"
)

type requestIDKey struct{}
type tenantIDKey struct{}
type deliveryKey struct{}

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
func DeliveryFrom(ctx context.Context) *ports.Delivery {
	d, _ := ctx.Value(deliveryKey{}).(*ports.Delivery)
	return d
}

// deliveryCtx is an item's context without an allocation of its own: it is
// embedded in the delivery's root record and answers the request id,
// tenant id and delivery keys from the delivery's headers.
type deliveryCtx struct {
	context.Context
	d *ports.Delivery
}

func (c *deliveryCtx) Value(key any) any {
	switch key.(type) {
	case requestIDKey:
		if v := c.d.Headers.Get(ports.HeaderRequestID); v != "" {
			return v
		}
	case tenantIDKey:
		if v := c.d.Headers.Get(ports.HeaderTenantID); v != "" {
			return v
		}
	case deliveryKey:
		return c.d
	}
	return c.Context.Value(key)
}
