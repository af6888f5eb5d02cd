// Package app holds what every example program shares: the -url and -v
// flags, an interrupt-cancelled main, and opening the adapter with the
// start-up line each example prints.
package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/all" // -url may name any broker
	"github.com/sluicemq/sluice/ports"
)

// Flags are the flags every example takes.
type Flags struct {
	url     *string
	verbose *bool
}

// RegisterFlags defines -url (default mem://) and -v on the default flag set;
// call it before flag.Parse.
func RegisterFlags() Flags {
	return Flags{
		url:     flag.String("url", "mem://", "adapter URL: mem://, amqp://…, kafka://…, mqtt://…, pulsar://…"),
		verbose: flag.Bool("v", false, "log the adapter's capabilities and fallbacks to stderr"),
	}
}

// URL is the -url flag.
func (f Flags) URL() string { return *f.url }

// Logger is a stderr logger with -v, nil without (adapters.Open then logs
// warnings only).
func (f Flags) Logger() *slog.Logger {
	if !*f.verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// Main runs fn with a context cancelled on interrupt; an error is printed
// as "<name>: <error>" and exits with status 1.
func Main(name string, fn func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := fn(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Open opens the adapter at url (logging with logger when it is not nil)
// and prints "adapter <name>: <capabilities>" to w. The caller closes it.
func Open(ctx context.Context, url string, logger *slog.Logger, w io.Writer) (ports.Adapter, error) {
	var opts []adapters.Option
	if logger != nil {
		opts = append(opts, adapters.WithLogger(logger))
	}
	a, err := adapters.Open(ctx, url, opts...)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "adapter %s: %s\n", a.Name(), a.Capabilities())
	return a, nil
}
