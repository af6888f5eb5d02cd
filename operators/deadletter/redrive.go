package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/sluicemq/sluice/ports"
)

// Request is a redrive or purge.
type Request struct {
	// Operator (who) and Note (why) are required; both go to the audit
	// record.
	Operator string
	Note     string
	// Filter selects the dead letters (the zero Filter: all of them).
	Filter Filter
	// Target is a redrive's destination; empty sends each message back to
	// its source topic (sluice-dlq-topic, else the area's source).
	Target ports.Topic
	// Force redrives messages already redriven Options.MaxRedrives times.
	Force bool
	// DryRun selects and reports, writes no audit record and moves
	// nothing.
	DryRun bool
	// Progress, when set, is called after each batch: once when its
	// copies were confirmed (a redrive) and once when its dead-letter
	// copies were settled. It runs on the caller's goroutine; a ctx
	// cancelled from it abandons the operation before the batch's
	// dead-letter copies are settled, as a crash would.
	Progress func(Progress)
}

// Progress reports a redrive or purge under way.
type Progress struct {
	// Selected is how many messages the operation acts on.
	Selected int
	// Sent counts redriven copies confirmed so far (0 for a purge).
	Sent int
	// Settled counts dead-letter copies removed from the area so far.
	Settled int
}

// Result reports a redrive or purge.
type Result struct {
	// AuditID is the audit record's id (empty for a dry run or when
	// nothing was selected).
	AuditID string `json:"auditId,omitempty"`
	// Selected are the ids acted on; Refused those left in the area for
	// having been redriven Options.MaxRedrives times.
	Selected []string `json:"selected"`
	Refused  []string `json:"refused,omitempty"`
	// Done counts dead-letter copies redriven (confirmed, then removed) or
	// purged.
	Done int `json:"done"`
	// Missing are selected ids the second pass did not find (taken by
	// another reader, or dropped by retention in between).
	Missing []string `json:"missing,omitempty"`
	// Failed counts copies whose send was not confirmed; they were put
	// back in the area.
	Failed int  `json:"failed,omitempty"`
	DryRun bool `json:"dryRun,omitempty"`
	// Plan is the selecting pass.
	Plan Pass `json:"plan"`
}

// Redrive sends the selected dead letters to their source topic (or
// r.Target), each batch confirmed before its dead-letter copies are
// removed, after writing the audit record. See the package doc.
func (ar *Area) Redrive(ctx context.Context, r Request) (Result, error) {
	return ar.operate(ctx, ActionRedrive, r)
}

// Purge removes the selected dead letters, after writing the audit
// record. It never refuses by redrive count (r.Force is ignored) and
// ignores r.Target.
func (ar *Area) Purge(ctx context.Context, r Request) (Result, error) {
	r.Force, r.Target = false, ""
	return ar.operate(ctx, ActionPurge, r)
}

func (ar *Area) operate(ctx context.Context, action string, r Request) (Result, error) {
	if err := checkWho(r.Operator, r.Note); err != nil {
		return Result{}, err
	}
	if err := r.Filter.Validate(); err != nil {
		return Result{}, err
	}
	if r.Target != "" {
		if err := r.Target.Validate(); err != nil {
			return Result{}, err
		}
	}
	res := Result{DryRun: r.DryRun}
	entries, plan, err := ar.List(ctx, r.Filter)
	res.Plan = plan
	if err != nil {
		return res, err
	}
	selected := map[string]bool{}
	for _, e := range entries {
		if selected[e.ID] || contains(res.Refused, e.ID) {
			continue
		}
		if action == ActionRedrive && e.Redrives >= ar.o.MaxRedrives && !r.Force {
			res.Refused = append(res.Refused, e.ID)
			continue
		}
		selected[e.ID] = true
		res.Selected = append(res.Selected, e.ID)
	}
	if r.DryRun || len(res.Selected) == 0 {
		ar.o.Logger.Info("dead-letter "+action+" changed nothing",
			slog.Bool("dry_run", r.DryRun), slog.String("operator", r.Operator), slog.String("topic", string(ar.source)),
			slog.String("group", ar.group), slog.String("filter", r.Filter.String()),
			slog.Int("selected", len(res.Selected)), slog.Any("refused", res.Refused))
		return res, nil
	}
	rec := ar.newRecord(action, r.Operator, r.Note, r.Filter)
	rec.Target, rec.IDs, rec.Count, rec.Refused, rec.Forced = r.Target, res.Selected, len(res.Selected), res.Refused, r.Force
	if err := ar.writeRecord(ctx, rec); err != nil {
		return res, err
	}
	res.AuditID = rec.ID

	left := make(map[string]bool, len(selected))
	for id := range selected {
		left[id] = true
	}
	prog := Progress{Selected: len(res.Selected)}
	act := func(ctx context.Context, sub ports.Subscription, taken []*ports.Delivery) error {
		for _, d := range taken {
			delete(left, entryOf(d).ID)
		}
		if action == ActionPurge {
			if err := sub.Settle(ctx, taken, ports.Disposition{Action: ports.Ack}); err != nil {
				return fmt.Errorf("purging %d dead letters: %w", len(taken), err)
			}
			res.Done += len(taken)
			prog.Settled += len(taken)
			ar.report(r, prog)
			return nil
		}
		return ar.redriveBatch(ctx, sub, taken, r, rec.ID, &res, &prog)
	}
	for pass := 0; pass < MaxTakePasses && len(left) > 0; pass++ {
		before := len(left)
		_, err = ar.walk(ctx, visitor{
			take: func(d *ports.Delivery) bool { return selected[entryOf(d).ID] },
			act:  act,
			done: func() bool { return len(left) == 0 },
		})
		if err != nil || len(left) == before {
			break // failed, or found none of them: another pass would not either
		}
	}
	for _, id := range res.Selected {
		if err == nil && left[id] {
			res.Missing = append(res.Missing, id)
		}
	}
	lvl := slog.LevelInfo
	if err != nil || res.Failed > 0 || len(res.Missing) > 0 {
		lvl = slog.LevelWarn
	}
	ar.o.Logger.Log(context.WithoutCancel(ctx), lvl, "dead-letter "+action+" finished",
		slog.String("audit_id", rec.ID), slog.Int("done", res.Done), slog.Int("failed", res.Failed),
		slog.Any("missing", res.Missing), slog.Any("error", err))
	return res, err
}

// MaxTakePasses bounds the passes a redrive or purge makes to take the
// selected ids (see the package documentation).
const MaxTakePasses = 3

// redriveBatch sends the copies of one batch, waits for their confirms,
// then removes the confirmed ones from the area and puts the others back.
func (ar *Area) redriveBatch(ctx context.Context, sub ports.Subscription, taken []*ports.Delivery, r Request, auditID string, res *Result, prog *Progress) error {
	msgs := make([]ports.Message, len(taken))
	for i, d := range taken {
		msgs[i] = ar.redriveCopy(d, r.Target, auditID)
	}
	sendErr := ar.a.Send(ctx, msgs...)
	failed := map[int]bool{}
	if sendErr != nil {
		ses := ports.SendErrors(sendErr)
		if len(ses) == 0 { // not attributed: none counts as confirmed
			for i := range taken {
				failed[i] = true
			}
		}
		for _, se := range ses {
			failed[se.Index] = true
		}
	}
	var ok, bad []*ports.Delivery
	for i, d := range taken {
		if failed[i] {
			bad = append(bad, d)
		} else {
			ok = append(ok, d)
		}
	}
	prog.Sent += len(ok)
	ar.report(r, *prog)
	if err := ctx.Err(); err != nil {
		// Abandoned after the sends: the dead-letter copies stay unsettled
		// and come back to the area; the next redrive sends them again.
		return err
	}
	if len(ok) > 0 {
		if err := sub.Settle(ctx, ok, ports.Disposition{Action: ports.Ack}); err != nil {
			return fmt.Errorf("removing %d redriven dead letters (their copies were sent; they will be redriven again): %w", len(ok), err)
		}
		res.Done += len(ok)
		prog.Settled += len(ok)
	}
	if len(bad) > 0 {
		res.Failed += len(bad)
		ar.o.Logger.Warn("dead-letter redrive: copies not confirmed, put back in the area", "count", len(bad), "error", sendErr)
		if err := sub.Settle(ctx, bad, ports.Disposition{Action: ports.Requeue}); err != nil {
			return fmt.Errorf("putting back %d dead letters whose redrive was not confirmed: %w", len(bad), err)
		}
	}
	ar.report(r, *prog)
	return nil
}

func (ar *Area) report(r Request, p Progress) {
	if r.Progress != nil {
		r.Progress(p)
	}
}

// redriveCopy is the message a redrive sends for d: same id, key, payload
// and headers, without the dead-letter headers, with HeaderRedriveCount
// one higher and HeaderRedriveAudit set.
func (ar *Area) redriveCopy(d *ports.Delivery, target ports.Topic, auditID string) ports.Message {
	h := d.Headers.Clone()
	if h.Get(ports.HeaderID) == "" && d.ID != "" {
		h.Set(ports.HeaderID, d.ID)
	}
	to := target
	if to == "" {
		to = ports.Topic(h.Get(ports.HeaderDeadLetterTopic))
		if to.Validate() != nil {
			to = ar.source
		}
	}
	n := redrivesOf(h) + 1
	for _, k := range []string{ports.HeaderDeadLetterReason, ports.HeaderDeadLetterTopic, ports.HeaderAttempts, ports.HeaderRedeliveryCount, HeaderFailedAt} {
		h.Del(k)
	}
	h.Set(HeaderRedriveCount, strconv.Itoa(n))
	h.Set(HeaderRedriveAudit, auditID)
	return ports.Message{Topic: to, Key: d.Key, Payload: d.Payload, Headers: h}
}
