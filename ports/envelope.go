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
	out := append(b[:0], idPrefix...)
	out = append(out, '-')
	out = strconv.AppendUint(out, idCounter.Add(1), 36)
	return string(out)
}

// Stamp fills the envelope headers a sender owns when they are missing:
// HeaderID, HeaderSpecVersion, HeaderTime, and HeaderPartitionKey from Key.
// It copies Headers first so the caller's map is never modified. Adapters
// call it at the top of Send.
func (m *Message) Stamp(now time.Time) {
	h := make(Headers, len(m.Headers)+4)
	for k, v := range m.Headers {
		h[k] = v
	}
	if h[HeaderID] == "" {
		h[HeaderID] = NewID()
	}
	if h[HeaderSpecVersion] == "" {
		h[HeaderSpecVersion] = "1.0"
	}
	if h[HeaderTime] == "" {
		h[HeaderTime] = now.UTC().Format(time.RFC3339Nano)
	}
	if m.Key != "" && h[HeaderPartitionKey] == "" {
		h[HeaderPartitionKey] = m.Key
	}
	m.Headers = h
}
