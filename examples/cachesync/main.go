// Command cachesync keeps the metadata caches of every running instance
// in sync with broadcast change events.
//
//	go run ./examples/cachesync
//	go run ./examples/cachesync -url amqp://guest:guest@127.0.0.1:5672/ -v
//
// Each instance subscribes in BROADCAST mode, so every instance gets its
// own copy of every change event and refreshes its own cache. Events carry
// a version, not a value: an instance applies a change only when it is
// newer than what it holds, so duplicates and reordered events are
// harmless. An instance that starts late subscribes first, then loads a
// snapshot — it misses nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

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
	app.Main("cachesync", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	a, err := app.Open(ctx, cfg.url, cfg.logger, w)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	if !a.Capabilities().Broadcast {
		return fmt.Errorf("adapter %s cannot broadcast", a.Name())
	}

	topic := ports.Topic("catalog.changed." + strings.ReplaceAll(ports.NewID(), "-", "."))
	// The change topic, declared once; the instances' specs and the sends
	// come from the registry. A change that is lost can be reloaded from
	// the catalog, but losing none is cheap: the topic stays at least once.
	reg, err := ports.NewRegistry(ports.TopicSpec{Topic: topic, NoDeadLetter: true})
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}
	sender := reg.Sender(a)
	cat := newCatalog(map[string]string{"price-list": "2026-01", "feature-flags": "dark-mode=off", "tax-rates": "standard"})
	fmt.Fprintf(w, "catalog: %s\n", describe(cat.snapshot()))

	// Each instance is one pipeline here; in production each is a process
	// with its own adapter and the same code.
	var running []*instance
	defer func() {
		for _, in := range running {
			_ = in.p.Stop(context.Background())
		}
	}()
	for _, name := range []string{"api-1", "api-2"} {
		in, err := start(ctx, a, reg, topic, name, cat)
		if err != nil {
			return err
		}
		running = append(running, in)
	}
	fmt.Fprintf(w, "api-1, api-2 started: subscribed to the change topic (BROADCAST), then loaded the catalog\n")

	publish := func(evs ...Changed) error {
		for _, ev := range evs {
			if err := flow.Send(ctx, sender, topic, ev, flow.Key(ev.Key)); err != nil {
				return err
			}
		}
		return nil
	}
	first := []Changed{cat.put("price-list", "2026-02"), cat.put("feature-flags", "dark-mode=on"), cat.put("price-list", "2026-03")}
	retried := first[0] // a producer retry after a lost confirm: an old event, again
	if err := publish(append(first, retried)...); err != nil {
		return err
	}
	fmt.Fprintf(w, "changed price-list to v2, feature-flags to v2, price-list to v3; the v2 price-list event was sent twice\n")
	for _, in := range running {
		if err := in.waitEvents(ctx, 4); err != nil {
			return err
		}
	}

	late, err := start(ctx, a, reg, topic, "api-3", cat)
	if err != nil {
		return err
	}
	running = append(running, late)
	_, lateCache := late.state()
	fmt.Fprintf(w, "api-3 started late: subscribed, then loaded the catalog (%s)\n", describe(lateCache))

	if err := publish(cat.put("tax-rates", "reduced"), cat.put("feature-flags", "dark-mode=auto")); err != nil {
		return err
	}
	fmt.Fprintf(w, "changed tax-rates to v2, feature-flags to v3\n")
	want := map[string]int{"api-1": 6, "api-2": 6, "api-3": 2}
	for _, in := range running {
		if err := in.waitEvents(ctx, want[in.name]); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "every instance got its own copy of every event published while it ran:")
	truth := cat.snapshot()
	agree := true
	for _, in := range running {
		events, cache := in.state()
		fmt.Fprintf(w, "  %s: %d events, cache %s\n", in.name, events, describe(cache))
		agree = agree && reflect.DeepEqual(cache, truth)
	}
	if !agree {
		return fmt.Errorf("a cache disagrees with the catalog (%s)", describe(truth))
	}
	fmt.Fprintf(w, "all caches agree with the catalog: %s\n", describe(truth))
	return nil
}
