// Command migrate moves a billing mailer written against raw amqp091-go
// topology names to sluice without changing a physical name: the topic
// exchange dc3.e.billing, the routing key dc3.r.billing.invoices and the
// queue dc3.q.billing.mailer are adopted (amqp.Options.Existing), used
// passively and never redeclared.
//
//	go run ./examples/migrate -url amqp://guest:guest@127.0.0.1:5672/
//
// It needs a RabbitMQ: the topology is RabbitMQ's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/examples/internal/app"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Invoice is what the billing domain publishes.
type Invoice struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

// The logical names the migrated code uses; Options.Existing maps them
// onto the legacy physical names.
const (
	invoices = ports.Topic("billing.invoices")
	mailer   = "mailer"
)

// existing adopts the legacy topology.
func existing() *amqp.Existing {
	return &amqp.Existing{
		Topics: map[ports.Topic]amqp.ExistingTopic{
			invoices:                        {Exchange: legacyExchange, RoutingKey: legacyKey},
			ports.DeadLetterTopic(invoices): {Exchange: legacyExchange, RoutingKey: legacyDeadKey},
		},
		Groups: map[amqp.ExistingGroup]string{{Topic: invoices, Group: mailer}: legacyQueue},
	}
}

type config struct {
	url     string
	setup   bool // declare the legacy topology first, as the old deploy did
	logger  *slog.Logger
	timeout time.Duration
}

func main() {
	url := flag.String("url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	setup := flag.Bool("setup", true, "declare the legacy topology first (as the old deploy did)")
	flag.Parse()
	cfg := config{url: *url, setup: *setup, logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), timeout: time.Minute}
	app.Main("migrate", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.setup {
		if err := declareLegacy(cfg.url); err != nil {
			return fmt.Errorf("legacy topology: %w", err)
		}
	}
	a, err := amqp.New(ctx, amqp.Options{URL: cfg.url, Namespace: "billing-sluice", Existing: existing(), Logger: cfg.logger})
	if err != nil {
		return err
	}
	defer a.Close(context.Background())

	// The registry states the topic and its group. Declaring it checks
	// that the adopted queue exists and changes nothing: its arguments
	// (a day of retention) are the legacy deploy's.
	reg, err := ports.NewRegistry(ports.TopicSpec{Topic: invoices, Groups: []string{mailer}})
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}
	fmt.Fprintf(w, "adopted: %s as %s / %s, group %s as %s\n", invoices, legacyExchange, legacyKey, mailer, legacyQueue)

	var mu sync.Mutex
	var mailed []string
	spec, err := reg.Subscription(invoices, mailer)
	if err != nil {
		return err
	}
	p := flow.New(a, spec)
	flow.Sink(flow.Decode[Invoice](p.Source()), func(ctx context.Context, inv Invoice) error {
		if inv.Cents < 0 {
			return ports.Poisonf("invoice %s has a negative amount", inv.ID)
		}
		mu.Lock()
		mailed = append(mailed, fmt.Sprintf("mailed %s to %s (%d.%02d)", inv.ID, inv.Customer, inv.Cents/100, inv.Cents%100))
		mu.Unlock()
		return nil
	})
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop(context.Background())

	// The other services still publish the old way; the migrated billing
	// code publishes through sluice. Both reach the same queue.
	if err := legacyPublish(ctx, cfg.url, Invoice{ID: "inv-1", Customer: "acme", Cents: 12000}); err != nil {
		return err
	}
	send := reg.Sender(a)
	for _, inv := range []Invoice{{ID: "inv-2", Customer: "umbrella", Cents: 990}, {ID: "inv-3", Customer: "initech", Cents: -5}} {
		m, err := flow.NewMessage(ctx, invoices, inv, flow.Header(ports.HeaderID, inv.ID))
		if err != nil {
			return err
		}
		if err := send.Send(ctx, m); err != nil {
			return err
		}
	}
	if err := p.WaitSettled(ctx, 3); err != nil {
		return err
	}
	slices.Sort(mailed)
	for _, l := range mailed {
		fmt.Fprintln(w, l)
	}
	dead, err := legacyDeadLetters(cfg.url)
	if err != nil {
		return err
	}
	for _, d := range dead {
		fmt.Fprintf(w, "in %s: %s\n", legacyDeadQueue, d)
	}
	return nil
}
