package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicemq/sluice/ports"
)

// Decode decodes each delivery's JSON payload into a T. A payload that
// does not decode is poison (a *ports.DecodeError): it is dead-lettered
// with the reason and never retried. On the pipeline's source, Decode
// asks a subscription that fetches in parallel (ports.Predecoder: Kafka's
// partitions) to decode as it fetches, off the pipeline's receive loop.
func Decode[T any](in Stream[*ports.Delivery], opts ...StageOption) Stream[T] {
	typ := typeName[T]()
	into := newDecodeInto[T](stageOptions(opts).workers)
	if in.p != nil && in.ch == in.p.source { // the subscription may decode as it fetches
		in.p.predecode = func(payload []byte) any {
			v := new(T)
			if err := json.Unmarshal(payload, v); err != nil {
				return decodeFailed{err}
			}
			return v
		}
	}
	return via(in, func(it Item[*ports.Delivery], emit Emit[T]) {
		switch v := it.Value.Decoded.(type) {
		case *T:
			emit(With(it, *v))
			return
		case decodeFailed:
			_ = it.Completion.Fail(&ports.DecodeError{Type: typ, Err: v.err})
			return
		}
		p := into.get()
		err := json.Unmarshal(it.Value.Payload, p)
		v := *p
		into.put(p)
		if err != nil {
			_ = it.Completion.Fail(&ports.DecodeError{Type: typ, Err: err})
			return
		}
		emit(With(it, v))
	}, opts...)
}

// decodeFailed is a payload a subscription's predecode could not decode.
type decodeFailed struct{ err error }

// decodeInto holds the values Decode decodes into, so that a delivery
// costs no allocation for it: json.Unmarshal takes its target as an
// interface, so a local variable would escape to the heap every time.
//
// Lifetime: a target is taken by get, decoded into, copied out (the item
// carries T by value) and cleared and given back by put before the item
// is handed on, so no user code ever sees it and it holds no delivery's
// data between two uses. json.Unmarshal keeps no reference to its target.
// A one-worker stage runs one item at a time on one goroutine (its own,
// or its upstream's when fused), so one target serves it; a stage with
// more workers takes them from a sync.Pool. A target lost to a panic
// between get and put is replaced by a new one.
type decodeInto[T any] struct {
	one  *T
	pool *sync.Pool
}

func newDecodeInto[T any](workers int) *decodeInto[T] {
	d := &decodeInto[T]{}
	if workers > 1 {
		d.pool = &sync.Pool{New: func() any { return new(T) }}
	}
	return d
}

// get returns a zero T to decode into.
func (d *decodeInto[T]) get() *T {
	if d.pool != nil {
		return d.pool.Get().(*T)
	}
	p := d.one
	d.one = nil
	if p == nil {
		p = new(T)
	}
	return p
}

// put clears p and keeps it for the next get.
func (d *decodeInto[T]) put(p *T) {
	var zero T
	*p = zero
	if d.pool != nil {
		d.pool.Put(p)
		return
	}
	d.one = p
}

// DecodeWith decodes with a codec of the caller's (protobuf, a schema
// check, a version switch). Every error it returns is poison.
func DecodeWith[T any](in Stream[*ports.Delivery], decode func(payload []byte, v *T) error, opts ...StageOption) Stream[T] {
	typ := typeName[T]()
	return via(in, func(it Item[*ports.Delivery], emit Emit[T]) {
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
func Header(k, v string) MessageOption { return func(m *ports.Message) { m.Headers.Set(k, v) } }

// Type sets the payload type header, ce-type (none by default; under
// CloudEvents, the Go type name unless Type sets one). On RabbitMQ it
// also travels as the AMQP type property.
func Type(t string) MessageOption { return Header(ports.HeaderType, t) }

// CloudEvents makes the message a CloudEvent in binary content mode: it
// sets ce-specversion to 1.0, ce-source to source and ce-time to the
// current time (each unless already set), and NewMessage fills ce-type
// with the Go type name unless Type sets one. With ce-id, which every
// message carries, these are the attributes CloudEvents requires of an
// event. sluice's settlement needs none of them, so a message carries
// them only when asked: keep one option value for a producer,
//
//	ce := flow.CloudEvents("https://orders.example.com")
//	err := flow.Send(ctx, sender, topic, paid, ce, flow.Type("com.example.order.paid.v1"))
//
// source is a URI-reference naming the producer; NewMessage fails on a
// message that has ce-specversion but no ce-source.
func CloudEvents(source string) MessageOption {
	return func(m *ports.Message) {
		if m.Headers.Get(ports.HeaderSpecVersion) == "" {
			m.Headers.Set(ports.HeaderSpecVersion, "1.0")
		}
		if m.Headers.Get(ports.HeaderSource) == "" && source != "" {
			m.Headers.Set(ports.HeaderSource, source)
		}
		if m.Headers.Get(ports.HeaderTime) == "" {
			m.Headers.Set(ports.HeaderTime, string(ports.AppendTime(make([]byte, 0, 40), time.Now())))
		}
	}
}

// NewMessage encodes v as JSON into a message for topic: the payload, the
// content type (application/json) and a new id (ce-id), and from ctx the
// request id and tenant id (WithRequestID, WithTenantID, or the delivery
// being handled), the correlation id and, when ctx belongs to a delivery,
// the causation id (that delivery's id). No other envelope header is
// written unless opts ask for it (Type, CloudEvents, Header). It stamps
// the message as Send would (ports.Message.StampInPlace), so that Send
// need not copy its headers.
func NewMessage[T any](ctx context.Context, topic ports.Topic, v T, opts ...MessageOption) (ports.Message, error) {
	payload, id, err := encodeWithID(v)
	if err != nil {
		return ports.Message{}, fmt.Errorf("flow: encode %s: %w", typeName[T](), err)
	}
	request, tenant := RequestID(ctx), TenantID(ctx)
	cause, corr, fromDelivery := causeOf(ctx)
	// Room for what is written here and two more (a partition key's
	// mirror, a header of the caller's) without growing: the content
	// type, the id, the context's ids.
	n := 4 + btoi(request != "") + btoi(tenant != "")
	if fromDelivery {
		n += 2 // causation, correlation
	}
	m := ports.Message{Topic: topic, Payload: payload, Headers: append(make(ports.Headers, 0, n),
		ports.Header{Name: ports.HeaderContentType, Value: "application/json"})}
	if request != "" {
		m.Headers.Set(ports.HeaderRequestID, request)
	}
	if tenant != "" {
		m.Headers.Set(ports.HeaderTenantID, tenant)
	}
	if fromDelivery {
		// A delivery without identity (ports.IDNone) causes no causation
		// id; its correlation id, if it carries one, is still inherited.
		if cause != "" {
			m.Headers.Set(ports.HeaderCausationID, cause)
		}
		if corr == "" {
			corr = cause
		}
		if corr != "" {
			m.Headers.Set(ports.HeaderCorrelationID, corr)
		}
	}
	if len(opts) > 0 {
		o := m // escapes to the options: only a message with options pays for it
		for _, opt := range opts {
			opt(&o)
		}
		m = o
		if m.Headers.Get(ports.HeaderSpecVersion) != "" {
			if m.Headers.Get(ports.HeaderSource) == "" {
				return ports.Message{}, fmt.Errorf("flow: a CloudEvent needs a source (%s): give flow.CloudEvents a non-empty URI-reference naming the producer", ports.HeaderSource)
			}
			if m.Headers.Get(ports.HeaderType) == "" {
				m.Headers.Set(ports.HeaderType, typeName[T]())
			}
		}
	}
	if m.Headers.Get(ports.HeaderID) == "" {
		m.Headers.Set(ports.HeaderID, id)
	}
	m.StampInPlace() // the partition key: nothing left to allocate
	return m, nil
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// jsonBuffer is an encoder with its buffer, reused through jsonBuffers.
type jsonBuffer struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonBuffers = sync.Pool{New: func() any {
	b := new(jsonBuffer)
	b.enc = json.NewEncoder(&b.buf)
	return b
}}

// encodeWithID encodes v as json.Marshal does and makes a new message id,
// both in one allocation: the id is a string over the bytes after the
// payload, which the payload's capacity does not reach.
func encodeWithID(v any) (payload []byte, id string, err error) {
	jb := jsonBuffers.Get().(*jsonBuffer)
	defer func() {
		if jb.buf.Cap() <= 64<<10 { // a rare large value does not stay in the pool
			jsonBuffers.Put(jb)
		}
	}()
	jb.buf.Reset()
	if err := jb.enc.Encode(v); err != nil {
		return nil, "", err
	}
	js := jb.buf.Bytes()
	js = js[:len(js)-1] // Encode ends the value with a newline
	const idRoom = 48   // an id: 24 hex digits, '-' and a base-36 counter
	b := append(make([]byte, 0, len(js)+idRoom), js...)
	n := len(b)
	b = ports.AppendNewID(b)
	return b[:n:n], unsafe.String(&b[n], len(b)-n), nil
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
