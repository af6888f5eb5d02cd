package ports

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"
)

// idPrefix is 12 random bytes, drawn once per process; NewID appends a
// counter so ids are unique without a syscall per message.
var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("sluice: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// NewID returns a process-unique, globally unique-with-overwhelming-
// probability message id.
func NewID() string {
	var b [64]byte
	return string(AppendNewID(b[:0]))
}

// AppendNewID appends a new id (as NewID returns) to b, for a caller
// that builds the id into a buffer of its own.
func AppendNewID(b []byte) []byte {
	b = append(b, idPrefix...)
	b = append(b, '-')
	return strconv.AppendUint(b, idCounter.Add(1), 36)
}

// Stamp fills the envelope headers the settlement contract needs when
// they are missing: HeaderID, and HeaderPartitionKey from Key (for the
// brokers without a key field). Nothing else: the CloudEvents attributes
// (HeaderSpecVersion, HeaderTime, HeaderType, HeaderSource) and trace
// context travel when the sender sets them (flow.CloudEvents, a tracing
// sender), so a message pays on every hop only for what it uses. It copies
// Headers first, when one is missing, so the caller's headers are never
// modified. Adapters call it at the top of Send.
func (m *Message) Stamp() {
	if m.stamped() {
		return
	}
	// A copy with room for the two Stamp may add.
	m.Headers = append(make(Headers, 0, len(m.Headers)+2), m.Headers...)
	m.StampInPlace()
}

// stamped reports whether m has every header Stamp fills.
func (m *Message) stamped() bool {
	h := m.Headers
	return h.Get(HeaderID) != "" && (m.Key == "" || h.Get(HeaderPartitionKey) != "")
}

// StampInPlace is Stamp without the copy, for a message whose Headers the
// caller made for it and shares with nothing (flow.NewMessage's, say): it
// sets them in place (nil ones are made).
func (m *Message) StampInPlace() {
	h := m.Headers
	if h == nil {
		h = make(Headers, 0, 2)
	}
	if h.Get(HeaderID) == "" {
		h.Set(HeaderID, NewID())
	}
	if m.Key != "" && h.Get(HeaderPartitionKey) == "" {
		h.Set(HeaderPartitionKey, m.Key)
	}
	m.Headers = h
}

// stampSecond is the formatted date and time of one second, shared by the
// stamps of that second.
type stampSecond struct {
	unix int64
	text string // "2006-01-02T15:04:05", UTC
}

var lastStampSecond atomic.Pointer[stampSecond]

// AppendTime appends t as HeaderTime holds it: in UTC, as
// time.RFC3339Nano formats it. The date and time of day are formatted once
// per second and reused; only the fraction is written per call.
func AppendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	unix := t.Unix()
	s := lastStampSecond.Load()
	if s == nil || s.unix != unix {
		s = &stampSecond{unix: unix, text: t.Format("2006-01-02T15:04:05")}
		lastStampSecond.Store(s)
	}
	b = append(b, s.text...)
	if ns := t.Nanosecond(); ns != 0 {
		// Nine digits, trailing zeros trimmed, as RFC3339Nano does.
		var f [10]byte
		f[0] = '.'
		for i := 9; i > 0; i-- {
			f[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := len(f)
		for f[n-1] == '0' {
			n--
		}
		b = append(b, f[:n]...)
	}
	return append(b, 'Z')
}
