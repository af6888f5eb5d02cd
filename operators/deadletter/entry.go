package deadletter

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Entry describes one dead letter.
type Entry struct {
	// ID is the message id (ce-id), stable across dead-lettering and
	// redrive.
	ID string `json:"id"`
	// Key is the partition key; Type the payload type (ce-type).
	Key  string `json:"key,omitempty"`
	Type string `json:"type,omitempty"`
	// Reason is why it was dead-lettered (sluice-dlq-reason).
	Reason string `json:"reason"`
	// Source is the topic it was dead-lettered from (sluice-dlq-topic).
	Source ports.Topic `json:"source"`
	// Attempts is the deliveries made before dead-lettering
	// (sluice-attempts; 0 when absent).
	Attempts int `json:"attempts"`
	// Redrives is how many times it was redriven before (HeaderRedriveCount).
	Redrives int `json:"redrives"`
	// Published is the original publish time (ce-time; zero when absent).
	Published time.Time `json:"published,omitzero"`
	// FailedAt is when it was dead-lettered (HeaderFailedAt; zero when the
	// adapter does not stamp it).
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Size is the payload's length in bytes.
	Size int `json:"size"`
	// Headers are every header of the dead-letter copy (Show only).
	Headers ports.Headers `json:"headers,omitempty"`
	// Payload is the payload, only when Show was asked to reveal it.
	Payload []byte `json:"payload,omitempty"`
	// Masked says the payload was withheld (Show without reveal).
	Masked bool `json:"masked,omitempty"`
}

// When is the time filters and statistics use: FailedAt, or Published
// when the copy carries no failure time.
func (e Entry) When() time.Time {
	if !e.FailedAt.IsZero() {
		return e.FailedAt
	}
	return e.Published
}

// entryOf describes d without its headers and payload.
func entryOf(d *ports.Delivery) Entry {
	h := d.Headers
	id := d.ID
	if id == "" {
		id = h.Get(ports.HeaderID)
	}
	e := Entry{
		ID:     id,
		Key:    d.Key,
		Type:   h.Get(ports.HeaderType),
		Reason: h.Get(ports.HeaderDeadLetterReason),
		Source: ports.Topic(h.Get(ports.HeaderDeadLetterTopic)),
		Size:   len(d.Payload),
	}
	if e.Key == "" {
		e.Key = h.Get(ports.HeaderPartitionKey)
	}
	e.Attempts, _ = strconv.Atoi(h.Get(ports.HeaderAttempts))
	e.Redrives = redrivesOf(h)
	e.Published, _ = time.Parse(time.RFC3339Nano, h.Get(ports.HeaderTime))
	e.FailedAt, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderFailedAt))
	return e
}

// redrivesOf reads HeaderRedriveCount; a missing or malformed one is 0.
func redrivesOf(h ports.Headers) int {
	n, err := strconv.Atoi(h.Get(HeaderRedriveCount))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Filter selects dead letters. Zero fields select everything; set fields
// must all match.
type Filter struct {
	// IDs, when set, selects only these message ids.
	IDs []string `json:"ids,omitempty"`
	// Reason selects entries whose reason contains this text.
	Reason string `json:"reason,omitempty"`
	// Key and Type are path.Match patterns on the partition key and the
	// payload type ("device-*", "com.example.order.*").
	Key  string `json:"key,omitempty"`
	Type string `json:"type,omitempty"`
	// Since and Until bound Entry.When: Since <= When < Until.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// Validate reports a malformed pattern or an empty time range, wrapping
// ports.ErrInvalid.
func (f Filter) Validate() error {
	for _, p := range []struct{ field, pat string }{{"Filter.Key", f.Key}, {"Filter.Type", f.Type}} {
		if _, err := path.Match(p.pat, ""); err != nil {
			return &ports.ValueError{Field: p.field, Reason: fmt.Sprintf("bad pattern %q: %v", p.pat, err)}
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return &ports.ValueError{Field: "Filter.Until", Reason: fmt.Sprintf("%v is not after Since %v", f.Until, f.Since)}
	}
	return nil
}

// Match reports whether e passes f.
func (f Filter) Match(e Entry) bool {
	if len(f.IDs) > 0 && !contains(f.IDs, e.ID) {
		return false
	}
	if f.Reason != "" && !strings.Contains(e.Reason, f.Reason) {
		return false
	}
	if f.Key != "" {
		if ok, _ := path.Match(f.Key, e.Key); !ok {
			return false
		}
	}
	if f.Type != "" {
		if ok, _ := path.Match(f.Type, e.Type); !ok {
			return false
		}
	}
	w := e.When()
	if !f.Since.IsZero() && w.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !w.Before(f.Until) {
		return false
	}
	return true
}

// String is the filter in a form for logs and the audit record ("all"
// when it selects everything).
func (f Filter) String() string {
	var parts []string
	if len(f.IDs) > 0 {
		parts = append(parts, "ids="+strings.Join(f.IDs, ","))
	}
	if f.Reason != "" {
		parts = append(parts, fmt.Sprintf("reason~%q", f.Reason))
	}
	if f.Key != "" {
		parts = append(parts, "key="+f.Key)
	}
	if f.Type != "" {
		parts = append(parts, "type="+f.Type)
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since="+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until="+f.Until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
