package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Audit actions.
const (
	ActionRedrive = "redrive"
	ActionPurge   = "purge"
	ActionReveal  = "reveal"
)

// AuditType is the ce-type of an audit record message.
const AuditType = "sluice.deadletter.audit.v1"

// Record is one audit record: who did what to which dead letters, when and
// why. It is written as JSON to the audit topic (ce-id = ID, ce-type =
// AuditType, key = the area's source topic) and logged with slog, before
// the operation moves any message.
type Record struct {
	// ID is the audit id; redriven copies carry it in HeaderRedriveAudit.
	ID string `json:"id"`
	// Action is ActionRedrive, ActionPurge or ActionReveal.
	Action string `json:"action"`
	// Operator is who asked (a name the caller passes); Note is why.
	Operator string `json:"operator"`
	Note     string `json:"note"`
	// At is when the record was written.
	At time.Time `json:"at"`
	// Topic, DeadLetterTopic and Group name the area.
	Topic           ports.Topic `json:"topic"`
	DeadLetterTopic ports.Topic `json:"deadLetterTopic"`
	Group           string      `json:"group"`
	// Target is a redrive's destination when one was given (empty: each
	// message's source topic).
	Target ports.Topic `json:"target,omitempty"`
	// Filter is the selection as asked (Filter.String).
	Filter string `json:"filter"`
	// IDs are the message ids the operation acts on, Count their number.
	IDs   []string `json:"ids"`
	Count int      `json:"count"`
	// Refused are ids left in the area because they were redriven
	// Options.MaxRedrives times already; Forced says Request.Force was set.
	Refused []string `json:"refused,omitempty"`
	Forced  bool     `json:"forced,omitempty"`
}

// ParseRecord decodes an audit record message's payload.
func ParseRecord(payload []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(payload, &r); err != nil {
		return r, fmt.Errorf("audit record: %w", err)
	}
	if r.ID == "" || r.Action == "" {
		return r, fmt.Errorf("audit record: %w: id and action are required", ports.ErrInvalid)
	}
	return r, nil
}

// checkWho requires an operator name and a note.
func checkWho(operator, note string) error {
	if strings.TrimSpace(operator) == "" {
		return &ports.ValueError{Field: "Operator", Reason: "is required: the audit trail records who acted"}
	}
	if strings.TrimSpace(note) == "" {
		return &ports.ValueError{Field: "Note", Reason: "is required: the audit trail records why"}
	}
	return nil
}

func (ar *Area) newRecord(action, operator, note string, f Filter) Record {
	return Record{
		ID: ar.o.NewID(), Action: action, Operator: operator, Note: note,
		At: ar.o.Now().UTC(), Topic: ar.source, DeadLetterTopic: ar.Topic(), Group: ar.group,
		Filter: f.String(),
	}
}

// writeRecord logs rec and sends it, confirmed, to the audit topic
// (declaring that topic first, so a record is never sent to a topic that
// would not keep it).
func (ar *Area) writeRecord(ctx context.Context, rec Record) error {
	ar.o.Logger.Info("dead-letter audit",
		slog.String("audit_id", rec.ID), slog.String("action", rec.Action),
		slog.String("operator", rec.Operator), slog.String("note", rec.Note),
		slog.Time("at", rec.At), slog.String("topic", string(rec.Topic)), slog.String("group", rec.Group),
		slog.String("target", string(rec.Target)), slog.String("filter", rec.Filter),
		slog.Int("count", rec.Count), slog.Any("ids", rec.IDs), slog.Any("refused", rec.Refused), slog.Bool("forced", rec.Forced))
	if err := ar.declareAudit(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	m := ports.Message{Topic: ar.o.AuditTopic, Key: string(ar.source), Payload: b, Headers: ports.NewHeaders(
		ports.HeaderID, rec.ID,
		ports.HeaderType, AuditType,
		ports.HeaderContentType, "application/json",
		ports.HeaderTime, rec.At.Format(time.RFC3339Nano),
	)}
	if err := ar.a.Send(ctx, m); err != nil {
		return fmt.Errorf("writing audit record %s to %q (nothing was changed): %w", rec.ID, string(ar.o.AuditTopic), err)
	}
	return nil
}

// AuditTrail returns the records on the area's audit topic, read through
// AuditGroup in one pass that leaves them there (see the package doc:
// a pass puts each record back). A payload that is not a record is
// reported as an error after the pass.
func (ar *Area) AuditTrail(ctx context.Context) ([]Record, Pass, error) {
	var out []Record
	var bad []error
	p, err := ar.walkTopic(ctx, ar.o.AuditTopic, AuditGroup, visitor{take: func(d *ports.Delivery) bool {
		r, err := ParseRecord(d.Payload)
		if err != nil {
			bad = append(bad, fmt.Errorf("message %s: %w", d.ID, err))
		} else {
			out = append(out, r)
		}
		return false
	}})
	if err == nil {
		err = errors.Join(bad...)
	}
	return out, p, err
}
