package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	"github.com/sluicemq/sluice/ports"
)

// OrderPlaced is the event the order service publishes.
type OrderPlaced struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

// orderService owns the orders table and its outbox, in one database.
type orderService struct {
	db    *sql.DB
	topic ports.Topic
}

func openDB(ctx context.Context, path, schema string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return db, nil
}

const ordersSchema = `
CREATE TABLE IF NOT EXISTS orders (
	id       TEXT PRIMARY KEY,
	customer TEXT NOT NULL,
	cents    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	msg_id  TEXT NOT NULL UNIQUE,
	topic   TEXT NOT NULL,
	key     TEXT NOT NULL,
	payload BLOB NOT NULL,
	headers TEXT NOT NULL,
	created TEXT NOT NULL
);`

var errDuplicateOrder = errors.New("duplicate order id")

// place stores the order and its OrderPlaced event in one transaction:
// both rows or neither. The event gets its message id here, so every
// publish of it — retries included — carries the same id.
func (s *orderService) place(ctx context.Context, o OrderPlaced) (err error) {
	if o.Cents <= 0 {
		return fmt.Errorf("order %s: total must be positive", o.Order)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, customer, cents) VALUES (?, ?, ?)`, o.Order, o.Customer, o.Cents); err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return fmt.Errorf("order %s: %w", o.Order, errDuplicateOrder)
		}
		return err
	}
	payload, err := json.Marshal(o)
	if err != nil {
		return err
	}
	headers, err := json.Marshal(ports.NewHeaders(
		ports.HeaderType, "com.example.order.placed.v1",
		ports.HeaderContentType, "application/json",
		ports.HeaderSource, "order-service",
	))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox (msg_id, topic, key, payload, headers, created) VALUES (?, ?, ?, ?, ?, ?)`,
		ports.NewID(), string(s.topic), o.Order, payload, string(headers), time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return err
	}
	return tx.Commit()
}

// counts returns the rows in orders and in the outbox.
func (s *orderService) counts(ctx context.Context) (orders, outbox int, err error) {
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders); err != nil {
		return 0, 0, err
	}
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox`).Scan(&outbox); err != nil {
		return 0, 0, err
	}
	return orders, outbox, nil
}
