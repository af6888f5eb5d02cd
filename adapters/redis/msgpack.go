package redis

import "github.com/vmihailenco/msgpack"

// The watermill-redisstream wire format carries a message's metadata as a
// MessagePack map of strings, written and read with the library
// watermill-redisstream uses.

func msgpackMap(m map[string]string) []byte {
	b, _ := msgpack.Marshal(m) // a map of strings always encodes
	return b
}

func unmsgpackMap(b []byte) (map[string]string, error) {
	var m map[string]string
	err := msgpack.Unmarshal(b, &m)
	return m, err
}
