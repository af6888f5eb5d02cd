package redis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The watermill-redisstream wire format carries a message's metadata as a
// MessagePack map of strings. These two functions encode and decode exactly
// that shape (a map whose keys and values are strings; nil values decode as
// ""), nothing more.

func msgpackMap(m map[string]string) []byte {
	b := make([]byte, 0, 16+32*len(m))
	switch n := len(m); {
	case n < 16:
		b = append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xde, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdf)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	for k, v := range m {
		b = msgpackStr(b, k)
		b = msgpackStr(b, v)
	}
	return b
}

func msgpackStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

var errMsgpack = errors.New("malformed MessagePack metadata")

func unmsgpackMap(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, errMsgpack
	}
	var n int
	switch c := b[0]; {
	case c == 0xc0:
		return map[string]string{}, nil
	case c&0xf0 == 0x80:
		n, b = int(c&0x0f), b[1:]
	case c == 0xde && len(b) >= 3:
		n, b = int(binary.BigEndian.Uint16(b[1:])), b[3:]
	case c == 0xdf && len(b) >= 5:
		n, b = int(binary.BigEndian.Uint32(b[1:])), b[5:]
	default:
		return nil, fmt.Errorf("%w: not a map (0x%02x)", errMsgpack, c)
	}
	if n > len(b) {
		return nil, errMsgpack
	}
	m := make(map[string]string, n)
	for range n {
		k, rest, err := unmsgpackStr(b)
		if err != nil {
			return nil, err
		}
		v, rest, err := unmsgpackStr(rest)
		if err != nil {
			return nil, err
		}
		m[k], b = v, rest
	}
	return m, nil
}

func unmsgpackStr(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errMsgpack
	}
	var n int
	switch c := b[0]; {
	case c == 0xc0:
		return "", b[1:], nil
	case c&0xe0 == 0xa0:
		n, b = int(c&0x1f), b[1:]
	case (c == 0xd9 || c == 0xc4) && len(b) >= 2:
		n, b = int(b[1]), b[2:]
	case (c == 0xda || c == 0xc5) && len(b) >= 3:
		n, b = int(binary.BigEndian.Uint16(b[1:])), b[3:]
	case (c == 0xdb || c == 0xc6) && len(b) >= 5:
		n, b = int(binary.BigEndian.Uint32(b[1:])), b[5:]
	default:
		return "", nil, fmt.Errorf("%w: not a string (0x%02x)", errMsgpack, c)
	}
	if n > len(b) {
		return "", nil, errMsgpack
	}
	return string(b[:n]), b[n:], nil
}
