package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluicemq/sluice/flow"
)

// notifications is the consuming service: it emails the customer once
// per order, however often the event arrives. Its own database records
// the message ids it handled, in the same transaction as its own effect.
type notifications struct {
	db *sql.DB

	mu         sync.Mutex
	deliveries int
	emailed    []string
	duplicates int
	changed    chan struct{}
	noID       sync.Once // logs the first message without identity
}

const notificationsSchema = `
CREATE TABLE IF NOT EXISTS processed (msg_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS emails (order_id TEXT NOT NULL, customer TEXT NOT NULL);`

func (n *notifications) handle(ctx context.Context, o OrderPlaced) error {
	d := flow.DeliveryFrom(ctx)
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	first := int64(1)
	if d.HasIdentity() {
		res, err := tx.ExecContext(ctx, `INSERT INTO processed (msg_id) VALUES (?) ON CONFLICT (msg_id) DO NOTHING`, d.ID)
		if err != nil {
			return err
		}
		first, _ = res.RowsAffected()
	} else {
		// A message without identity (published without an id, on a
		// broker that assigns none) cannot be told from another one:
		// handled every time, never dropped as a duplicate.
		n.noID.Do(func() {
			slog.Warn("notifications: messages without identity are handled without deduplication", "topic", string(d.Topic))
		})
	}
	if first == 1 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO emails (order_id, customer) VALUES (?, ?)`, o.Order, o.Customer); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deliveries++
	if first == 1 {
		n.emailed = append(n.emailed, o.Order)
	} else {
		n.duplicates++
	}
	close(n.changed)
	n.changed = make(chan struct{})
	return nil
}

// waitDeliveries blocks until n deliveries were handled.
func (n *notifications) waitDeliveries(ctx context.Context, want int) error {
	for {
		n.mu.Lock()
		got, ch := n.deliveries, n.changed
		n.mu.Unlock()
		if got >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("notifications handled %d of %d deliveries: %w", got, want, ctx.Err())
		}
	}
}

func (n *notifications) emails(ctx context.Context) (int, error) {
	var c int
	err := n.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM emails`).Scan(&c)
	return c, err
}
