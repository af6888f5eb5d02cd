package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

// printer writes a command's outcome as a table for people or as one JSON
// document for scripts.
type printer struct {
	w    io.Writer
	json bool
}

func (p printer) encode(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// when formats an entry's time, starred when it is the publish time.
func when(e deadletter.Entry) string {
	if !e.FailedAt.IsZero() {
		return e.FailedAt.UTC().Format(time.RFC3339)
	}
	if e.Published.IsZero() {
		return "-"
	}
	return e.Published.UTC().Format(time.RFC3339) + "*"
}

func (p printer) list(es []deadletter.Entry, pass deadletter.Pass) error {
	if p.json {
		if es == nil {
			es = []deadletter.Entry{}
		}
		return p.encode(struct {
			Entries []deadletter.Entry `json:"entries"`
			Pass    deadletter.Pass    `json:"pass"`
		}{es, pass})
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tTYPE\tREASON\tSOURCE\tATTEMPTS\tREDRIVES\tWHEN\tBYTES")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\n", e.ID, dash(e.Key), dash(e.Type), short(e.Reason, 40), e.Source, e.Attempts, e.Redrives, when(e), e.Size)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(p.w, "%d dead letter(s); the pass examined %d and ended %s", len(es), pass.Examined, pass.End)
	if !pass.Complete() {
		fmt.Fprint(p.w, " (partial: raise --limit)")
	}
	fmt.Fprintln(p.w)
	if len(es) > 0 && es[0].FailedAt.IsZero() {
		fmt.Fprintln(p.w, "* publish time: the dead-letter copy carries no failure time")
	}
	return nil
}

func (p printer) show(e deadletter.Entry) error {
	if p.json {
		return p.encode(e)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nkey\t%s\ntype\t%s\nreason\t%s\nsource\t%s\nattempts\t%d\nredrives\t%d\nwhen\t%s\n",
		e.ID, dash(e.Key), dash(e.Type), e.Reason, e.Source, e.Attempts, e.Redrives, when(e))
	hs := slices.SortedFunc(slices.Values(e.Headers), func(a, b ports.Header) int { return strings.Compare(a.Name, b.Name) })
	for _, h := range hs {
		fmt.Fprintf(tw, "header\t%s: %s\n", h.Name, h.Value)
	}
	if e.Masked {
		fmt.Fprintf(tw, "payload\t%d bytes, masked (--reveal --operator NAME --note WHY shows it, audited)\n", e.Size)
	} else {
		fmt.Fprintf(tw, "payload\t%s\n", e.Payload)
	}
	return tw.Flush()
}

func (p printer) stats(area *deadletter.Area, s deadletter.Stats) error {
	if p.json {
		return p.encode(s)
	}
	fmt.Fprintf(p.w, "%s, group %s: %d dead letter(s), %d bytes, %d redriven before\n", area.Topic(), area.Group(), s.Count, s.Bytes, s.Redriven)
	if s.Count > 0 {
		fmt.Fprintf(p.w, "first %s, last %s\n", stamp(s.First), stamp(s.Last))
	}
	state := "below"
	if s.OverAlert {
		state = "OVER"
	}
	fmt.Fprintf(p.w, "alert threshold %d: %s\n", s.AlertAt, state)
	for _, r := range s.Reasons() {
		fmt.Fprintf(p.w, "  %4d  %s\n", s.ByReason[r], r)
	}
	srcs := make([]string, 0, len(s.BySource))
	for t := range s.BySource {
		srcs = append(srcs, string(t))
	}
	sort.Strings(srcs)
	for _, t := range srcs {
		fmt.Fprintf(p.w, "  %4d  from %s\n", s.BySource[ports.Topic(t)], t)
	}
	if !s.Pass.Complete() {
		fmt.Fprintln(p.w, "partial: the pass stopped at --limit")
	}
	return nil
}

func (p printer) result(verb string, r deadletter.Result) error {
	if p.json {
		return p.encode(r)
	}
	past := map[string]string{"redrive": "redriven", "purge": "purged"}[verb]
	switch {
	case r.DryRun:
		// sorted: a queue broker hands the area back in the order the
		// last pass left it, which is not the order of interest
		fmt.Fprintf(p.w, "dry run: would %s %d: %s\n", verb, len(r.Selected), strings.Join(slices.Sorted(slices.Values(r.Selected)), " "))
	case len(r.Selected) == 0:
		fmt.Fprintf(p.w, "nothing selected: nothing %s\n", past)
	default:
		fmt.Fprintf(p.w, "%s %d of %d (audit %s)\n", past, r.Done, len(r.Selected), r.AuditID)
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(p.w, "refused %d already redriven the maximum number of times (--force): %s\n", len(r.Refused), strings.Join(r.Refused, " "))
	}
	if r.Failed > 0 {
		fmt.Fprintf(p.w, "%d not confirmed by the broker: left in the area\n", r.Failed)
	}
	if !r.Plan.Complete() {
		fmt.Fprintf(p.w, "the selecting pass stopped at --limit after %d: run again for the rest\n", r.Plan.Examined)
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(p.w, "%d no longer in the area: %s\n", len(r.Missing), strings.Join(r.Missing, " "))
	}
	return nil
}

func (p printer) declared(area *deadletter.Area, d deadletter.Declared) error {
	if p.json {
		return p.encode(d)
	}
	fmt.Fprintf(p.w, "declared %s (group %s) and %s (group %s)\n", area.Topic(), area.Group(), area.AuditTopic(), deadletter.AuditGroup)
	fmt.Fprintf(p.w, "retention: max age %v, max length %d\n", d.MaxAge, d.MaxLength)
	for _, n := range d.NotEnforced {
		fmt.Fprintf(p.w, "not enforced: %s\n", n)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (p printer) audit(recs []deadletter.Record, pass deadletter.Pass) error {
	if p.json {
		if recs == nil {
			recs = []deadletter.Record{}
		}
		return p.encode(struct {
			Records []deadletter.Record `json:"records"`
			Pass    deadletter.Pass     `json:"pass"`
		}{recs, pass})
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AUDIT\tAT\tOPERATOR\tACTION\tCOUNT\tFILTER\tNOTE")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, stamp(r.At), r.Operator, r.Action, r.Count, r.Filter, r.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(p.w, "%d record(s)\n", len(recs))
	return nil
}
