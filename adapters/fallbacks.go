package adapters

import (
	"context"
	"log/slog"

	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Fallback is what the core does for a capability the broker lacks (see
// portable.Fallback).
type Fallback = portable.Fallback

// Fallbacks lists the fallbacks in force for an adapter with caps, in the
// order of ports.Capabilities.String.
func Fallbacks(caps ports.Capabilities) []Fallback { return portable.Fallbacks(caps) }

// logOpened logs the start-up line: adapter, URL, capabilities, fallbacks
// (Info), and one warning per degraded guarantee. The adapter's own
// start-up records are kept from the caller's logger (see Config.Logger),
// so the caller reads them once, with the URL.
func logOpened(l *slog.Logger, a ports.Adapter, shown string) {
	portable.LogCapabilities(l, "sluice: adapter opened", a.Name(), a.Capabilities(), "url", shown)
}

// openerHandler passes on every record but an adapter's start-up records
// (portable.ReadyMessage, portable.DegradedMessage): Open logs them once
// itself, with the URL.
type openerHandler struct{ slog.Handler }

func (h openerHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == portable.ReadyMessage || r.Message == portable.DegradedMessage {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h openerHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return openerHandler{h.Handler.WithAttrs(as)}
}

func (h openerHandler) WithGroup(name string) slog.Handler {
	return openerHandler{h.Handler.WithGroup(name)}
}
