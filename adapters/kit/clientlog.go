package kit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// ClientLog is the logger to hand a broker client that logs through one
// logger per process (go-redis's SetLogger, sarama.Logger) instead of one
// per connection: it writes each line at Warn to the slog.Logger of the
// adapter opened last that is still open, or to slog.Default() when none
// is, instead of the client's default (stderr). The zero value is ready;
// it is safe for concurrent use.
type ClientLog struct {
	// Name is the client's adapter ("redis"): each line says "<Name>
	// client: <line>" (without the client's own "<Name>: " prefix), with
	// the attribute adapter=<Name>.
	Name string

	once sync.Once
	to   atomic.Pointer[slog.Logger]
}

// Use makes l the logger lines go to (the adapter opened last). The
// first Use calls install, which hands c to the client; a program that
// installs a logger of its own afterwards keeps it.
func (c *ClientLog) Use(l *slog.Logger, install func()) {
	c.once.Do(install)
	c.to.Store(l)
}

// Done stops writing to l (its adapter closed) unless another adapter
// opened since.
func (c *ClientLog) Done(l *slog.Logger) { c.to.CompareAndSwap(l, nil) }

// Printf writes one line (go-redis's logging interface).
func (c *ClientLog) Printf(ctx context.Context, format string, v ...any) {
	line := strings.TrimPrefix(fmt.Sprintf(format, v...), c.Name+": ")
	cmp.Or(c.to.Load(), slog.Default()).Log(ctx, slog.LevelWarn, c.Name+" client: "+line, "adapter", c.Name)
}
