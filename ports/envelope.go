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
	return string(appendID(b[:0]))
}

func appendID(b []byte) []byte {
	b = append(b, idPrefix...)
	b = append(b, '-')
	return strconv.AppendUint(b, idCounter.Add(1), 36)
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
	// The id and the time are written into one string (one allocation
	// for both).
	var b [128]byte
	text := b[:0]
	needID, needTime := h[HeaderID] == "", h[HeaderTime] == ""
	if needID {
		text = appendID(text)
	}
	idLen := len(text)
	if needTime {
		text = now.UTC().AppendFormat(text, time.RFC3339Nano)
	}
	if len(text) > 0 {
		all := string(text)
		if needID {
			h[HeaderID] = all[:idLen]
		}
		if needTime {
			h[HeaderTime] = all[idLen:]
		}
	}
	if h[HeaderSpecVersion] == "" {
		h[HeaderSpecVersion] = "1.0"
	}
	if m.Key != "" && h[HeaderPartitionKey] == "" {
		h[HeaderPartitionKey] = m.Key
	}
	m.Headers = h
}
