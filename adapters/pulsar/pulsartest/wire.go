package pulsartest

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file holds the two protobuf primitives the broker is built on: an
// append-only encoder for outgoing messages and a field walker for incoming
// ones. Every message of the protocol is written by hand on top of them (see
// commands.go and replies.go), so the broker carries no generated code.

// errMalformed marks bytes that are not a valid protobuf encoding.
var errMalformed = errors.New("pulsartest: malformed protobuf")

// enc appends protobuf fields to a byte slice. Its zero value is ready.
type enc struct{ b []byte }

func (e *enc) varint(n protowire.Number, v uint64) {
	e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

// int32 encodes a proto int32: negative values are sign-extended to 64 bits.
func (e *enc) int32(n protowire.Number, v int32) { e.varint(n, uint64(int64(v))) }

func (e *enc) int64(n protowire.Number, v int64) { e.varint(n, uint64(v)) }

func (e *enc) bool(n protowire.Number, v bool) { e.varint(n, protowire.EncodeBool(v)) }

func (e *enc) bytes(n protowire.Number, v []byte) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, v)
}

func (e *enc) string(n protowire.Number, v string) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendString(e.b, v)
}

// message encodes a nested message written by fill.
func (e *enc) message(n protowire.Number, fill func(*enc)) {
	var sub enc
	fill(&sub)
	e.bytes(n, sub.b)
}

// field is one decoded protobuf field. For varint fields v holds the value;
// for length-delimited fields data holds the bytes (aliasing the input).
type field struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64
	data []byte
}

// walk calls fn for every field of the encoded message b, in wire order.
// Fixed-width and group fields are skipped; malformed input is an error.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// str returns a length-delimited field as a string.
func (f field) str() string { return string(f.data) }

// i32 returns a varint field as a proto int32.
func (f field) i32() int32 { return int32(f.v) }

// int64s appends the values of a repeated int64 field, accepting both the
// packed and the unpacked encoding.
func (f field) int64s(dst []int64) ([]int64, error) {
	if f.typ == protowire.VarintType {
		return append(dst, int64(f.v)), nil
	}
	b := f.data
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return dst, fmt.Errorf("%w: packed varint", errMalformed)
		}
		dst = append(dst, int64(v))
		b = b[n:]
	}
	return dst, nil
}
