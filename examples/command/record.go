package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// record keeps what happened to every command, for the report.
type record struct {
	mu       sync.Mutex
	want     int
	ships    map[string]string // order → line
	dead     map[string]string // order → line
	failures map[string][]string
	done     chan struct{}
	closed   bool
}

func newRecord(n int) *record {
	return &record{want: n, ships: map[string]string{}, dead: map[string]string{},
		failures: map[string][]string{}, done: make(chan struct{})}
}

func (r *record) failed(order string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures[order] = append(r.failures[order], err.Error())
}

func (r *record) shipped(c ShipOrder, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := fmt.Sprintf("%s from %s (attempt %d", c.Order, c.Warehouse, attempt)
	if f := r.failures[c.Order]; len(f) > 0 {
		line += ", after: " + f[len(f)-1]
	}
	r.ships[c.Order] = line + ")"
	r.checkLocked()
}

// deadLettered is the dead-letter receiver's handler.
func (r *record) deadLettered(ctx context.Context, c ShipOrder) error {
	d := flow.DeliveryFrom(ctx)
	attempts, _ := strconv.Atoi(d.Headers.Get(ports.HeaderAttempts))
	noun := "attempts"
	if attempts == 1 {
		noun = "attempt"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead[c.Order] = fmt.Sprintf("%s after %d %s: %s", c.Order, attempts, noun, d.Headers.Get(ports.HeaderDeadLetterReason))
	r.checkLocked()
	return nil
}

func (r *record) checkLocked() {
	if !r.closed && len(r.ships)+len(r.dead) >= r.want {
		r.closed = true
		close(r.done)
	}
}

func (r *record) progress() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d shipped, %d dead-lettered of %d", len(r.ships), len(r.dead), r.want)
}

func (r *record) report(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	section := func(title string, lines map[string]string) {
		fmt.Fprintf(w, "%s (%d):\n", title, len(lines))
		keys := make([]string, 0, len(lines))
		for k := range lines {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s\n", lines[k])
		}
	}
	section("shipped before the deadline", r.ships)
	section("dead-letter receiver got, unexecuted", r.dead)
	for o := range r.ships {
		if _, twice := r.dead[o]; twice {
			return fmt.Errorf("order %s was both shipped and dead-lettered", o)
		}
	}
	fmt.Fprintln(w, "every command was executed once before its deadline, or dead-lettered unexecuted")
	return nil
}
