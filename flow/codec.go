package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/sluicemq/sluice/ports"
)

// Decode decodes each delivery's JSON payload into a T. A payload that
// does not decode is poison (a *ports.DecodeError): it is dead-lettered
// with the reason and never retried.
func Decode[T any](in Stream[*ports.Delivery], opts ...StageOption) Stream[T] {
	return DecodeWith(in, func(b []byte, v *T) error { return json.Unmarshal(b, v) }, opts...)
}

// DecodeWith decodes with a codec of the caller's (protobuf, a schema
// check, a version switch). Every error it returns is poison.
func DecodeWith[T any](in Stream[*ports.Delivery], decode func(payload []byte, v *T) error, opts ...StageOption) Stream[T] {
	typ := typeName[T]()
	return Via(in, func(it Item[*ports.Delivery], emit Emit[T]) {
		var v T
		if err := decode(it.Value.Payload, &v); err != nil {
			_ = it.Completion.Fail(&ports.DecodeError{Type: typ, Err: err})
			return
		}
		emit(With(it, v))
	}, opts...)
}

func typeName[T any]() string {
	return reflect.TypeFor[T]().String()
}

// MessageOption sets a field of a message built by NewMessage.
type MessageOption func(*ports.Message)

// Key sets the partition key.
func Key(k string) MessageOption { return func(m *ports.Message) { m.Key = k } }

// Header sets one header.
func Header(k, v string) MessageOption { return func(m *ports.Message) { m.Headers[k] = v } }

// Type sets the payload type header (default: the Go type name).
func Type(t string) MessageOption { return Header(ports.HeaderType, t) }

// NewMessage encodes v as JSON into a message for topic and fills the
// envelope from ctx: the request id and tenant id (WithRequestID,
// WithTenantID, or the delivery being handled), the correlation id and, when
// ctx belongs to a delivery, the causation id (that delivery's id).
func NewMessage[T any](ctx context.Context, topic ports.Topic, v T, opts ...MessageOption) (ports.Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ports.Message{}, fmt.Errorf("flow: encode %s: %w", typeName[T](), err)
	}
	m := ports.Message{Topic: topic, Payload: b, Headers: ports.Headers{
		ports.HeaderType:        typeName[T](),
		ports.HeaderContentType: "application/json",
	}}
	if id := RequestID(ctx); id != "" {
		m.Headers[ports.HeaderRequestID] = id
	}
	if id := TenantID(ctx); id != "" {
		m.Headers[ports.HeaderTenantID] = id
	}
	if d := DeliveryFrom(ctx); d != nil {
		// A delivery without identity (ports.IDNone) causes no causation
		// id; its correlation id, if it carries one, is still inherited.
		if d.ID != "" {
			m.Headers[ports.HeaderCausationID] = d.ID
		}
		corr := d.Headers[ports.HeaderCorrelationID]
		if corr == "" {
			corr = d.ID
		}
		if corr != "" {
			m.Headers[ports.HeaderCorrelationID] = corr
		}
	}
	for _, o := range opts {
		o(&m)
	}
	return m, nil
}

// Send encodes v with NewMessage and sends it with confirms; it returns
// only after the broker confirmed the publish.
func Send[T any](ctx context.Context, s ports.Sender, topic ports.Topic, v T, opts ...MessageOption) error {
	m, err := NewMessage(ctx, topic, v, opts...)
	if err != nil {
		return err
	}
	return s.Send(ctx, m)
}
