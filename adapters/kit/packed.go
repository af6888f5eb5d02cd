package kit

import "github.com/sluicemq/sluice/ports"

// Packed copies m's payload and the key and value of each of its headers
// into one allocation, for a client that keeps byte slices after the call
// that took them returns (a Kafka producer keeps a record's until it is
// sent, also after a cancelled Send, while the portable layer may reuse
// the Send's batch): header is called with the copies of
// each header, and the payload's copy is returned (nil for a nil payload,
// which Kafka tells from an empty one). One allocation instead of one per
// slice: an envelope of six headers made thirteen per record.
func Packed(m *ports.Message, header func(key, value []byte)) []byte {
	n := len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	buf := make([]byte, 0, n)
	next := func(s string) []byte { // the copy of s, capacity capped
		buf = append(buf, s...)
		return buf[len(buf)-len(s) : len(buf) : len(buf)]
	}
	for k, v := range m.Headers {
		header(next(k), next(v))
	}
	if m.Payload == nil {
		return nil
	}
	return append(buf, m.Payload...)[len(buf):]
}
