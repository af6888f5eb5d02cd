package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// recordHandler keeps every record it is handed, with its attributes.
type recordHandler struct {
	mu      sync.Mutex
	level   slog.Level
	records []slog.Record
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// lines returns the records with message msg, each as its attributes.
func (h *recordHandler) lines(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

func (h *recordHandler) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.records {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
		b.WriteString("\n")
	}
	return b.String()
}

func TestDebugLogsEachRequeueAndDeadLetterWithoutPayload(t *testing.T) {
	h := &recordHandler{level: slog.LevelDebug}
	errBad := errors.New("bad order")
	f, p := start(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
			if string(d.Payload) == `{"secret":"poison"}` {
				return ports.Poison(errBad)
			}
			return errTransient
		})
	}, flow.WithLogger(slog.New(h)))
	retry, poison := delivery(`{"secret":"retry"}`, 1), delivery(`{"secret":"poison"}`, 0)
	f.push(retry, poison)
	f.waitSettled(t, 2)
	// Stop waits for the engine, which accounts (and logs) each settlement.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	req := h.lines("sluice: requeued")
	if len(req) != 1 || req[0]["id"] != retry.ID || req[0]["attempt"] != "2" || req[0]["reason"] != errTransient.Error() {
		t.Fatalf("requeue lines = %v, want one with id %s, attempt 2, reason %q\n%s", req, retry.ID, errTransient, h.all())
	}
	dl := h.lines("sluice: dead-lettered")
	if len(dl) != 1 || dl[0]["id"] != poison.ID || dl[0]["attempt"] != "1" || !strings.Contains(dl[0]["reason"], "bad order") {
		t.Fatalf("dead-letter lines = %v, want one with id %s, attempt 1, reason naming %q\n%s", dl, poison.ID, errBad, h.all())
	}
	if out := h.all(); strings.Contains(out, "secret") {
		t.Fatalf("a log line carries a payload:\n%s", out)
	}
}

func TestNoSettlementLinesAboveDebug(t *testing.T) {
	h := &recordHandler{level: slog.LevelInfo}
	f, p := start(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return errTransient })
	}, flow.WithLogger(slog.New(h)))
	f.push(delivery(`{}`, 0))
	f.waitSettled(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := len(h.lines("sluice: requeued")); n != 0 {
		t.Fatalf("%d requeue lines at Info level, want none", n)
	}
}
