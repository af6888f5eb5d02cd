package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// HeaderDeadline carries a command's deadline (RFC 3339), a CloudEvents
// extension attribute of this application.
const HeaderDeadline = "ce-deadline"

// ShipOrder is the command.
type ShipOrder struct {
	Order     string `json:"order"`
	Warehouse string `json:"warehouse"`
}

// scenario is one command to send and how far away its deadline is.
type scenario struct {
	ShipOrder
	in  time.Duration // deadline = send time + in
	raw string        // a raw deadline header instead, when set
}

func (s scenario) deadline(now time.Time) string {
	if s.raw != "" {
		return s.raw
	}
	return now.Add(s.in).UTC().Format(time.RFC3339Nano)
}

func commands() []scenario {
	return []scenario{
		{ShipOrder: ShipOrder{"o-1", "berlin"}, in: 5 * time.Second},          // ships at once
		{ShipOrder: ShipOrder{"o-2", "berlin"}, in: -time.Second},             // sat in a queue too long
		{ShipOrder: ShipOrder{"o-3", "madrid"}, in: time.Second},              // the warehouse hangs past the deadline
		{ShipOrder: ShipOrder{"o-4", "lyon"}, in: 5 * time.Second},            // one transient failure, then ships
		{ShipOrder: ShipOrder{"o-5", "atlantis"}, in: 5 * time.Second},        // no such warehouse
		{ShipOrder: ShipOrder{"o-6", "berlin"}, raw: "tomorrow, first thing"}, // a deadline nobody can read
	}
}

// shipper executes commands against the warehouses.
type shipper struct {
	warehouses *warehouses
	rec        *record
}

// handle executes one command, bounded by its deadline. Its result
// settles the delivery: nil acks; poison (a passed deadline, an unknown
// warehouse, an unreadable deadline) dead-letters at once; another error
// requeues with backoff, and the next attempt finds out whether time is
// left.
func (s *shipper) handle(ctx context.Context, c ShipOrder) error {
	d := flow.DeliveryFrom(ctx)
	attempt := d.RedeliveryCount + 1
	raw := d.Headers.Get(HeaderDeadline)
	deadline, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return &ports.HeaderError{Header: HeaderDeadline, Value: raw} // poison
	}
	if !time.Now().Before(deadline) {
		return ports.Poisonf("deadline passed before attempt %d: not executed", attempt)
	}
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := s.warehouses.ship(callCtx, c); err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the pipeline is stopping: no settlement, redelivered later
		}
		s.rec.failed(c.Order, err)
		return err // poison or retryable, as the warehouse said
	}
	s.rec.shipped(c, attempt)
	return nil
}

// warehouses simulate the remote warehouse API.
type warehouses struct {
	mu    sync.Mutex
	calls map[string]int
}

func newWarehouses() *warehouses { return &warehouses{calls: map[string]int{}} }

var errUnavailable = errors.New("503 service unavailable")

func (w *warehouses) ship(ctx context.Context, c ShipOrder) error {
	w.mu.Lock()
	w.calls[c.Order]++
	n := w.calls[c.Order]
	w.mu.Unlock()
	switch c.Warehouse {
	case "berlin":
		return nil
	case "lyon":
		if n == 1 {
			return fmt.Errorf("warehouse lyon: %w", errUnavailable)
		}
		return nil
	case "madrid": // hangs until the caller gives up
		<-ctx.Done()
		return fmt.Errorf("warehouse madrid: %w", ctx.Err())
	}
	return ports.Poisonf("unknown warehouse %q", c.Warehouse)
}
