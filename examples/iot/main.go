// Command iot ingests point values from a fleet of devices into SQLite.
//
//	go run ./examples/iot                       # on the embedded in-process broker
//	go run ./examples/iot -url amqp://guest:guest@127.0.0.1:5672/
//
// A batch pipeline decodes schema-versioned readings (v1 and v2; anything
// else is poison and dead-lettered with the reason), groups them into
// batches, writes each batch to SQLite in one transaction and acks the
// batch only after the commit. A failed write requeues the whole batch.
// Duplicates — a device re-sending a reading whose confirm it lost — are
// absorbed by the message id, the table's primary key.
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
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/examples/internal/app"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

type config struct {
	url     string
	db      string
	logger  *slog.Logger
	timeout time.Duration
}

func main() {
	f := app.RegisterFlags()
	db := flag.String("db", "", "SQLite file (default: a temporary file, removed at exit)")
	flag.Parse()
	cfg := config{url: f.URL(), logger: f.Logger(), db: *db, timeout: time.Minute}
	app.Main("iot", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	a, err := app.Open(ctx, cfg.url, cfg.logger, w)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())

	if cfg.db == "" {
		dir, err := os.MkdirTemp("", "sluice-iot-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.db = filepath.Join(dir, "readings.db")
	}
	st, err := openStore(ctx, cfg.db)
	if err != nil {
		return err
	}
	defer st.Close()

	// A run id keeps this run's topic apart from earlier runs on a real broker.
	topic := ports.Topic("iot.readings." + strings.ReplaceAll(ports.NewID(), "-", "."))
	f := simulate(topic)
	in := newIngest(st, len(f.msgs), f.poison())

	// The readings topic and its dead-letter topic, declared once: the
	// specs and the sends come from the registry.
	reg, err := ports.NewRegistry(
		ports.TopicSpec{Topic: topic, Groups: []string{"ingest"}},
		ports.TopicSpec{Topic: ports.DeadLetterTopic(topic), NoDeadLetter: true, Groups: []string{"ops"}},
	)
	if err != nil {
		return err
	}
	if err := reg.Declare(ctx, a); err != nil {
		return err
	}
	dlqSpec, err := reg.Subscription(ports.DeadLetterTopic(topic), "ops")
	if err != nil {
		return err
	}
	dlq := flow.New(a, dlqSpec)
	flow.Sink(dlq.Source(), in.deadLetter)

	spec, err := reg.Subscription(topic, "ingest")
	if err != nil {
		return err
	}
	spec.InFlight = 256
	spec.Retry = ports.RetryPolicy{MaxAttempts: 5, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	p := flow.New(a, adapters.Spec(a, spec), flow.WithObserver(in.observe))
	points := flow.DecodeWith(p.Source(), decodePoint) // every decode error is poison
	batches := operators.Batch(points, operators.BatchOptions{Size: 50, Window: 50 * time.Millisecond})
	flow.Sink(batches, in.write)

	for _, pl := range []*flow.Pipeline{dlq, p} {
		if err := pl.Start(ctx); err != nil {
			return err
		}
		defer pl.Stop(context.Background())
	}
	if err := f.publish(ctx, reg.Sender(a)); err != nil {
		return err
	}
	fmt.Fprintf(w, "published %d messages with confirms from %d devices (schema v1 and v2):\n", len(f.msgs), devices)
	fmt.Fprintf(w, "  %d good readings, %d of them sent twice with the same message id,\n", f.readings, f.duplicates)
	fmt.Fprintf(w, "  %d with an unknown schema version, %d malformed, %d invalid\n", f.unknown, f.malformed, f.invalid)

	select {
	case <-in.done:
	case <-ctx.Done():
		return fmt.Errorf("not every message was settled in time: %s", in.progress())
	}
	for _, pl := range []*flow.Pipeline{p, dlq} {
		if err := pl.Stop(ctx); err != nil {
			return err
		}
	}
	return in.report(ctx, w, f)
}

// ingest is the handler side: it writes batches and tracks every message.
type ingest struct {
	st         *store
	failFirst  atomic.Bool // simulate one failed write
	inserted   atomic.Int64
	written    atomic.Int64 // readings in committed batches
	failedOnce atomic.Bool
	noID       sync.Once // logs the first reading without identity

	mu      sync.Mutex
	settled int // acked or dead-lettered deliveries
	want    int
	dead    map[string]int // reason → count, from the dead-letter topic
	deadN   int
	wantDLQ int
	done    chan struct{}
	closed  bool
}

func newIngest(st *store, total, poison int) *ingest {
	in := &ingest{st: st, want: total, wantDLQ: poison, dead: map[string]int{}, done: make(chan struct{})}
	in.failFirst.Store(true)
	return in
}

// write stores one batch. Its result settles every member: nil acks the
// batch (after the commit), an error requeues all of it.
func (in *ingest) write(ctx context.Context, b operators.Batched[Point]) error {
	if in.failFirst.CompareAndSwap(true, false) {
		in.failedOnce.Store(true)
		return errors.New("disk I/O error (simulated)")
	}
	ids := make([]string, len(b.Msgs))
	for i, d := range b.Msgs {
		ids[i] = d.ID // "" when the message has no identity: stored, never deduplicated
		if !d.HasIdentity() {
			in.noID.Do(func() {
				slog.Warn("iot: readings without identity are stored without deduplication (their producer set no id and the broker assigns none)", "topic", string(d.Topic))
			})
		}
	}
	n, err := in.st.write(ctx, ids, b.Values)
	if err != nil {
		return err
	}
	in.inserted.Add(int64(n))
	in.written.Add(int64(len(b.Values)))
	return nil
}

func (in *ingest) observe(e flow.Event) {
	if e.Action != ports.Ack && e.Action != ports.DeadLetter {
		return
	}
	in.mu.Lock()
	in.settled++
	in.checkLocked()
	in.mu.Unlock()
}

func (in *ingest) deadLetter(_ context.Context, d *ports.Delivery) error {
	in.mu.Lock()
	in.dead[d.Headers.Get(ports.HeaderDeadLetterReason)]++
	in.deadN++
	in.checkLocked()
	in.mu.Unlock()
	return nil
}

func (in *ingest) checkLocked() {
	if !in.closed && in.settled >= in.want && in.deadN >= in.wantDLQ {
		in.closed = true
		close(in.done)
	}
}

func (in *ingest) progress() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return fmt.Sprintf("%d of %d settled, %d of %d dead letters received", in.settled, in.want, in.deadN, in.wantDLQ)
}

func (in *ingest) report(ctx context.Context, w io.Writer, f fleet) error {
	if in.failedOnce.Load() {
		fmt.Fprintln(w, "first batch write failed (simulated disk I/O error): the whole batch was requeued, nothing acked")
	}
	byPoint, total, err := in.st.summary(ctx)
	if err != nil {
		return err
	}
	var kinds []string
	for k := range byPoint {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byPoint[k]))
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "stored %d readings in SQLite, one transaction per batch (%s)\n", total, strings.Join(kinds, ", "))
	absorbed := in.written.Load() - in.inserted.Load()
	fmt.Fprintf(w, "duplicates absorbed by message id: %d\n", absorbed)
	fmt.Fprintf(w, "dead letters: %d\n", in.deadN)
	var reasons []string
	for r := range in.dead {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "  %d × %s\n", in.dead[r], r)
	}
	if total != f.readings || int(absorbed) != f.duplicates || in.deadN != f.poison() {
		return fmt.Errorf("expected %d stored, %d absorbed, %d dead letters", f.readings, f.duplicates, f.poison())
	}
	fmt.Fprintln(w, "every message ended stored, absorbed as a duplicate, or dead-lettered")
	return nil
}
