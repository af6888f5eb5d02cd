// Command outbox shows the transactional outbox: the business row and the
// event row are written in one SQLite transaction, and a relay publishes
// the outbox with confirms, deleting only the rows the broker confirmed.
//
//	go run ./examples/outbox
//	go run ./examples/outbox -url kafka://127.0.0.1:9092 -v
//
// An order is never published without being stored, nor stored without
// being published eventually. A publish whose confirm is lost is retried
// with the same message id; the consuming service deduplicates by it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/examples/internal/app"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

type config struct {
	url     string
	dir     string
	logger  *slog.Logger
	timeout time.Duration
}

func main() {
	f := app.RegisterFlags()
	dir := flag.String("dir", "", "directory for the two SQLite databases (default: a temporary one, removed at exit)")
	flag.Parse()
	cfg := config{url: f.URL(), logger: f.Logger(), dir: *dir, timeout: time.Minute}
	app.Main("outbox", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	a, err := app.Open(ctx, cfg.url, cfg.logger, w)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())

	if cfg.dir == "" {
		if cfg.dir, err = os.MkdirTemp("", "sluice-outbox-"); err != nil {
			return err
		}
		defer os.RemoveAll(cfg.dir)
	}
	ordersDB, err := openDB(ctx, filepath.Join(cfg.dir, "orders.db"), ordersSchema)
	if err != nil {
		return err
	}
	defer ordersDB.Close()
	notifyDB, err := openDB(ctx, filepath.Join(cfg.dir, "notifications.db"), notificationsSchema)
	if err != nil {
		return err
	}
	defer notifyDB.Close()

	topic := ports.Topic("orders.placed." + strings.ReplaceAll(ports.NewID(), "-", "."))
	svc := &orderService{db: ordersDB, topic: topic}
	notify := &notifications{db: notifyDB, changed: make(chan struct{})}

	// The event topic, declared once with the group that consumes it: the
	// consumer's spec and the relay's sends come from the registry.
	reg, err := ports.NewRegistry(ports.TopicSpec{Topic: topic, Groups: []string{"notifications"}})
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}
	sender := reg.Sender(a)

	// The consuming service.
	spec, err := reg.Subscription(topic, "notifications")
	if err != nil {
		return err
	}
	p := flow.New(a, adapters.Spec(a, spec))
	flow.Sink(flow.Decode[OrderPlaced](p.Source()), notify.handle)
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop(context.Background())

	// The order service takes orders; each accepted one is two rows in one
	// transaction.
	for _, o := range []OrderPlaced{
		{"o-1", "alice", 4200}, {"o-2", "bob", 1999}, {"o-3", "carol", 0},
		{"o-2", "dave", 500}, {"o-4", "erin", 5000}, {"o-5", "frank", 750}, {"o-6", "grace", 12000},
	} {
		if err := svc.place(ctx, o); err != nil {
			if errors.Is(err, errDuplicateOrder) || strings.Contains(err.Error(), "must be positive") {
				fmt.Fprintf(w, "rejected %s (%s): %v — nothing committed, no event\n", o.Order, o.Customer, err)
				continue
			}
			return err
		}
		fmt.Fprintf(w, "placed %s (%s): order row and outbox row committed in one transaction\n", o.Order, o.Customer)
	}
	orders, pending, err := svc.counts(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "order service: %d orders, %d events waiting in the outbox\n", orders, pending)

	// Round 1 over a link that loses two confirms; round 2 over a good one.
	lossy := &relay{db: ordersDB, sender: lossyLink{Sender: sender, lose: map[int]bool{1: true, 3: true}}, batch: 100}
	res, err := lossy.round(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "relay round 1: sent %d, %d confirmed and deleted, %d kept (confirm lost, simulated): %s\n",
		res.sent, res.confirmed, len(res.kept), strings.Join(res.kept, ", "))
	if err := notify.waitDeliveries(ctx, res.sent); err != nil {
		return err
	}
	delivered := res.sent

	r := &relay{db: ordersDB, sender: sender, batch: 100}
	for round := 2; ; round++ {
		res, err := r.round(ctx)
		if err != nil {
			return err
		}
		if res.sent == 0 {
			fmt.Fprintf(w, "relay round %d: outbox empty\n", round)
			break
		}
		fmt.Fprintf(w, "relay round %d: sent %d, %d confirmed and deleted\n", round, res.sent, res.confirmed)
		delivered += res.sent
		if err := notify.waitDeliveries(ctx, delivered); err != nil {
			return err
		}
	}

	// In production the relay runs in a loop beside the service.
	// Closing stopLoop ends it after the round under way, which deletes
	// what it published (cancelling the round's context instead could cut
	// it off between the confirm and the delete).
	stopLoop := make(chan struct{})
	var relayErrs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.loop(ctx, stopLoop, 20*time.Millisecond, func(err error) { relayErrs = append(relayErrs, err) })
	}()
	err = svc.place(ctx, OrderPlaced{"o-7", "heidi", 3100})
	if err == nil {
		fmt.Fprintf(w, "placed o-7 (heidi) while the relay polls the outbox every 20ms\n")
		err = notify.waitDeliveries(ctx, delivered+1)
	}
	close(stopLoop)
	wg.Wait()
	if err != nil {
		return err
	}
	if len(relayErrs) > 0 {
		return fmt.Errorf("relay: %w", errors.Join(relayErrs...))
	}
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return report(ctx, w, svc, notify)
}

func report(ctx context.Context, w io.Writer, svc *orderService, n *notifications) error {
	orders, pending, err := svc.counts(ctx)
	if err != nil {
		return err
	}
	emails, err := n.emails(ctx)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	emailed := append([]string(nil), n.emailed...)
	sort.Strings(emailed)
	fmt.Fprintf(w, "notifications: %d deliveries, %d duplicates ignored by message id, emailed once each: %s\n",
		n.deliveries, n.duplicates, strings.Join(emailed, ", "))
	fmt.Fprintf(w, "order service: %d orders, %d events left in the outbox\n", orders, pending)
	if emails != orders || pending != 0 {
		return fmt.Errorf("%d emails for %d orders, %d events left", emails, orders, pending)
	}
	fmt.Fprintln(w, "every stored order was published and notified exactly once; no rejected order was published")
	return nil
}
