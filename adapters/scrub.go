package adapters

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// secretSet is the set of secret values of one Open: the password and
// every secret read by Params.Secret. The opener may add to it while the
// logger already runs, hence the lock. A nil *secretSet holds nothing.
type secretSet struct {
	mu sync.RWMutex
	vs []string
}

func (s *secretSet) add(v string) {
	if s == nil || v == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, have := range s.vs {
		if have == v {
			return
		}
	}
	s.vs = append(s.vs, v)
}

func (s *secretSet) all() []string {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]string(nil), s.vs...)
}

// clean returns text with every secret replaced by "xxxxx".
func (s *secretSet) clean(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return scrubText(text, s.vs)
}

func (s *secretSet) empty() bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.vs) == 0
}

// scrubHandler is the handler of Config.Logger: it replaces every secret
// in a record's message and attributes (strings, errors, anything
// formatted) before passing it on, so that a broker client's error quoted
// in a log line cannot leak a password or token.
type scrubHandler struct {
	h slog.Handler
	s *secretSet
}

func (c scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return c.h.Enabled(ctx, l) }

func (c scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	if c.s.empty() {
		return c.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, c.s.clean(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(c.attr(a))
		return true
	})
	return c.h.Handle(ctx, out)
}

func (c scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = c.attr(a)
	}
	return scrubHandler{h: c.h.WithAttrs(clean), s: c.s}
}

func (c scrubHandler) WithGroup(name string) slog.Handler {
	return scrubHandler{h: c.h.WithGroup(name), s: c.s}
}

// attr scrubs one attribute; values other than strings, errors and
// groups are formatted and scrubbed only when their text holds a secret.
func (c scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, c.s.clean(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, m := range g {
			clean[i] = c.attr(m)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		text := fmt.Sprint(v.Any())
		if clean := c.s.clean(text); clean != text {
			return slog.String(a.Key, clean)
		}
		return slog.Attr{Key: a.Key, Value: v}
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
