package deadletter

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// ErrNotFound is returned by Show when no dead letter has the id.
var ErrNotFound = errors.New("no dead letter with this id in the area")

// List returns the entries passing f, in the order received, from one
// pass over the area (see the package doc for what a pass costs). Every
// dead letter stays in the area.
func (ar *Area) List(ctx context.Context, f Filter) ([]Entry, Pass, error) {
	if err := f.Validate(); err != nil {
		return nil, Pass{}, err
	}
	var out []Entry
	p, err := ar.walk(ctx, visitor{take: func(d *ports.Delivery) bool {
		if e := entryOf(d); f.Match(e) {
			out = append(out, e)
		}
		return false
	}})
	return out, p, err
}

// ShowOptions say how Show presents a dead letter.
type ShowOptions struct {
	// Reveal includes the payload. It is an inspection of possibly
	// personal data: Operator and Note are then required and an audit
	// Record (action "reveal") is written first.
	Reveal   bool
	Operator string
	Note     string
}

// Show returns the dead letter with id, with its headers; its payload is
// masked (Entry.Masked) unless o.Reveal. It stays in the area. It returns
// an error wrapping ErrNotFound when a pass does not find it.
func (ar *Area) Show(ctx context.Context, id string, o ShowOptions) (Entry, error) {
	if id == "" {
		return Entry{}, &ports.ValueError{Field: "id", Reason: "is required"}
	}
	if o.Reveal {
		if err := checkWho(o.Operator, o.Note); err != nil {
			return Entry{}, err
		}
	}
	var found *Entry
	var payload []byte
	_, err := ar.walk(ctx, visitor{
		take: func(d *ports.Delivery) bool {
			if e := entryOf(d); found == nil && e.ID == id {
				e.Headers = d.Headers.Clone()
				found = &e
				payload = append([]byte(nil), d.Payload...)
			}
			return false
		},
		done: func() bool { return found != nil },
	})
	if err != nil {
		return Entry{}, err
	}
	if found == nil {
		return Entry{}, fmt.Errorf("%q in %q (group %q): %w", id, string(ar.Topic()), ar.group, ErrNotFound)
	}
	e := *found
	if !o.Reveal {
		e.Masked = true
		return e, nil
	}
	rec := ar.newRecord(ActionReveal, o.Operator, o.Note, Filter{IDs: []string{id}})
	rec.IDs, rec.Count = []string{id}, 1
	if err := ar.writeRecord(ctx, rec); err != nil {
		return Entry{}, err
	}
	e.Payload = payload
	return e, nil
}

// Stats summarises the area.
type Stats struct {
	// Count and Bytes are the dead letters and their payload bytes seen.
	Count int `json:"count"`
	Bytes int `json:"bytes"`
	// ByReason and BySource count them per reason and per source topic.
	ByReason map[string]int      `json:"byReason"`
	BySource map[ports.Topic]int `json:"bySource"`
	// Redriven counts those redriven at least once before.
	Redriven int `json:"redriven"`
	// First and Last are the earliest and latest Entry.When.
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
	// AlertAt is the alert threshold; OverAlert says Count reached it.
	AlertAt   int  `json:"alertAt"`
	OverAlert bool `json:"overAlert"`
	// Pass says how the counting pass ended (Count is a lower bound when
	// it is not Complete).
	Pass Pass `json:"pass"`
}

// Reasons returns the reasons by descending count, then by text.
func (s Stats) Reasons() []string {
	rs := make([]string, 0, len(s.ByReason))
	for r := range s.ByReason {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if s.ByReason[rs[i]] != s.ByReason[rs[j]] {
			return s.ByReason[rs[i]] > s.ByReason[rs[j]]
		}
		return rs[i] < rs[j]
	})
	return rs
}

// Stats counts the area in one pass. When the area holds Options.AlertAt
// messages or more it logs a warning ("dead-letter area over its alert
// threshold") with the topic, group and count — the line to alert on.
func (ar *Area) Stats(ctx context.Context) (Stats, error) {
	s := Stats{ByReason: map[string]int{}, BySource: map[ports.Topic]int{}, AlertAt: ar.o.AlertAt}
	p, err := ar.walk(ctx, visitor{take: func(d *ports.Delivery) bool {
		e := entryOf(d)
		s.Count++
		s.Bytes += e.Size
		s.ByReason[e.Reason]++
		s.BySource[e.Source]++
		if e.Redrives > 0 {
			s.Redriven++
		}
		if w := e.When(); !w.IsZero() {
			if s.First.IsZero() || w.Before(s.First) {
				s.First = w
			}
			if w.After(s.Last) {
				s.Last = w
			}
		}
		return false
	}})
	s.Pass = p
	if err != nil {
		return s, err
	}
	if s.Count >= ar.o.AlertAt {
		s.OverAlert = true
		ar.o.Logger.Warn("dead-letter area over its alert threshold",
			"topic", string(ar.Topic()), "group", ar.group, "count", s.Count, "alert_at", ar.o.AlertAt, "complete", p.Complete())
	}
	return s, nil
}
