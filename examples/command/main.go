// Command command sends commands that carry a deadline and runs a handler
// that executes each at most until its deadline; what cannot be executed
// in time, or not at all, goes to a dead-letter receiver.
//
//	go run ./examples/command
//	go run ./examples/command -url mqtt://127.0.0.1:1883 -v
//
// A command is worth executing only before its deadline: a "ship order"
// that arrives after the truck left must not run. The handler bounds the
// warehouse call by the deadline, retries transient failures while time
// is left, and turns a passed deadline into poison so the command is
// dead-lettered, unexecuted, with the reason — never silently dropped and
// never executed late.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/examples/internal/app"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

type config struct {
	url     string
	logger  *slog.Logger
	timeout time.Duration
}

func main() {
	f := app.RegisterFlags()
	flag.Parse()
	cfg := config{url: f.URL(), logger: f.Logger(), timeout: time.Minute}
	app.Main("command", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	a, err := app.Open(ctx, cfg.url, cfg.logger, w)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())

	topic := ports.Topic("shipping.commands." + strings.ReplaceAll(ports.NewID(), "-", "."))
	cmds := commands()
	rec := newRecord(len(cmds))

	// The command topic and its dead-letter topic, declared once: the
	// specs and the sends come from the registry.
	reg, err := ports.NewRegistry(
		ports.TopicSpec{Topic: topic, Groups: []string{"warehouse"}},
		ports.TopicSpec{Topic: ports.DeadLetterTopic(topic), NoDeadLetter: true, Groups: []string{"dispatch-desk"}},
	)
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}

	// The dead-letter receiver: what could not be executed in time, or at
	// all, with the reason and the attempts made.
	dlqSpec, err := reg.Subscription(ports.DeadLetterTopic(topic), "dispatch-desk")
	if err != nil {
		return err
	}
	dlq := flow.New(a, dlqSpec)
	flow.Sink(flow.Decode[ShipOrder](dlq.Source()), rec.deadLettered)

	spec, err := reg.Subscription(topic, "warehouse")
	if err != nil {
		return err
	}
	spec.Retry = ports.RetryPolicy{MaxAttempts: 5, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}
	p := flow.New(a, adapters.Spec(a, spec))
	sh := &shipper{warehouses: newWarehouses(), rec: rec}
	flow.Sink(flow.Decode[ShipOrder](p.Source()), sh.handle, flow.Workers(4))

	for _, pl := range []*flow.Pipeline{dlq, p} {
		if err := pl.Start(ctx); err != nil {
			return err
		}
		defer pl.Stop(context.Background())
	}

	sender := reg.Sender(a)
	now := time.Now()
	for _, c := range cmds {
		deadline := c.deadline(now)
		if err := flow.Send(ctx, sender, topic, c.ShipOrder, flow.Key(c.Order), flow.Header(HeaderDeadline, deadline)); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "sent %d ship-order commands, each with a deadline (%s)\n", len(cmds), HeaderDeadline)

	select {
	case <-rec.done:
	case <-ctx.Done():
		return fmt.Errorf("not every command was executed or dead-lettered in time: %s", rec.progress())
	}
	for _, pl := range []*flow.Pipeline{p, dlq} {
		if err := pl.Stop(ctx); err != nil {
			return err
		}
	}
	return rec.report(w)
}
