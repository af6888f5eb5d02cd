package main

import (
	"context"
	"database/sql"
	"fmt"
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
}

const notificationsSchema = `
CREATE TABLE IF NOT EXISTS processed (msg_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS emails (order_id TEXT NOT NULL, customer TEXT NOT NULL);`

func (n *notifications) handle(ctx context.Context, o OrderPlaced) error {
	id := flow.DeliveryFrom(ctx).ID
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO processed (msg_id) VALUES (?) ON CONFLICT (msg_id) DO NOTHING`, id)
	if err != nil {
		return err
	}
	first, _ := res.RowsAffected()
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
