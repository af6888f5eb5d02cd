package kafkawire

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// lazy is a record whose headers stay in franz-go's record until they are
// asked for (driver.LazyHeaders), and its facts (a ports.FactSource),
// read from the record when read: nothing of either is copied, and no
// string is made, as the record is handed on.
type lazy struct {
	rec    *kgo.Record
	member *MemberFacts // the consumer's, shared by its records
	count  int          // the record's delivery count, 0 for none
	id     string       // the last HeaderID's value, a slice of Decode's string
	hasID  bool
}

// lazyChunk is how many records' lazy headers one allocation holds.
const lazyChunk = 256

// DecodeLazy is Decode for a franz-go record whose headers stay in it
// (driver.Record.Lazy) until the core asks for them: the key, the
// producer's id and, without a non-empty one, the BrokerID are one
// string, and the headers and facts are read from kr and member (which
// must not change; count, when not 0, is the record's delivery count in
// them) when asked for. A record with a transport header of the portable
// layer's (kit.TransportHeader) is not decoded (false): the caller
// decodes it with Decode.
func DecodeLazy(d *Decoder, t ports.Topic, kr *kgo.Record, member *MemberFacts, count int) (driver.Record, bool) {
	id := -1
	for i, h := range kr.Headers {
		if kit.TransportHeader(h.Key) {
			return driver.Record{}, false
		} else if h.Key == ports.HeaderID {
			id = i
		}
	}
	b := append(d.buf[:0], kr.Key...)
	if id >= 0 { // the identity every delivery reads: in the one string
		b = append(b, kr.Headers[id].Value...)
	}
	at := len(b)
	if id < 0 || len(kr.Headers[id].Value) == 0 { // the broker's identity, which the rule uses only then (driver.Record.BrokerID)
		b = append(append(b, "kafka:"...), kr.Topic...)
		b = strconv.AppendInt(append(b, '/'), int64(kr.Partition), 10)
		b = strconv.AppendInt(append(b, '/'), kr.Offset, 10)
	}
	d.buf = b
	all := string(b)
	l := &kit.Carve(&d.lazy, 1, lazyChunk)[0]
	*l = lazy{rec: kr, member: member, count: count, id: all[len(kr.Key):at], hasID: id >= 0}
	return driver.Record{Message: ports.Message{Topic: t, Key: all[:len(kr.Key)], Payload: kr.Value}, BrokerID: all[at:],
		Facts: ports.NewFacts(l), Lazy: l}, true
}

// Lookup returns the last value of the header name, copied (the
// identity's was when the record was decoded).
func (l *lazy) Lookup(name string) (string, bool) {
	if name == ports.HeaderID {
		return l.id, l.hasID
	}
	hs := l.rec.Headers
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == name {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

// Load returns the headers as Decode would have: the values one string
// of their own, a repeated name once with its last value.
func (l *lazy) Load() ports.Headers {
	hs := l.rec.Headers
	if len(hs) == 0 {
		return nil
	}
	size := 0
	for _, h := range hs {
		size += len(h.Value)
	}
	var b strings.Builder // the values' string, built in place: one allocation
	b.Grow(size)
	var few [16]named
	ends := few[:0]
	for _, h := range hs {
		b.Write(h.Value)
		ends = append(ends, named{name: h.Key, end: b.Len()})
	}
	return headers(make(ports.Headers, len(ends)), ends, b.String(), 0)
}

// Facts yields what Decode's facts do: topic, partition, offset,
// timestamp and the consumer's.
func (l *lazy) Facts(yield func(key, value string) bool) {
	r := l.rec
	f := facts{topic: r.Topic, partition: strconv.Itoa(int(r.Partition)), offset: strconv.FormatInt(r.Offset, 10), timestamp: r.Timestamp}
	if l.member != nil {
		f.member = *l.member
	}
	if l.count != 0 {
		f.member.DeliveryCount = l.count
	}
	f.Facts(yield)
}
