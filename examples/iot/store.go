package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// store keeps point values in SQLite. The message id is unique, so a
// redelivered or republished reading is absorbed, not stored twice. A
// reading without identity (a device publishing without an id, on a
// broker that assigns none: ports.Delivery.HasIdentity) is stored with a
// NULL id — SQLite's UNIQUE lets NULLs repeat — so it is never mistaken
// for a duplicate of another one.
type store struct {
	db *sql.DB
}

func openStore(ctx context.Context, path string) (*store, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer; SQLite serialises writes anyway
	const schema = `
CREATE TABLE IF NOT EXISTS readings (
	seq    INTEGER PRIMARY KEY,
	msg_id TEXT UNIQUE,
	device TEXT NOT NULL,
	point  TEXT NOT NULL,
	value  REAL NOT NULL,
	unit   TEXT NOT NULL,
	at     TEXT NOT NULL
)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return &store{db: db}, nil
}

func (s *store) Close() error { return s.db.Close() }

// write stores a batch in one transaction and reports how many readings
// were new (the rest were duplicates by message id; an id "" is no
// identity and never a duplicate). It returns only after the commit: the
// batch is acked after that, never before.
func (s *store) write(ctx context.Context, ids []string, ps []Point) (inserted int, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO readings (msg_id, device, point, value, unit, at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (msg_id) DO NOTHING`)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	for i, p := range ps {
		id := sql.NullString{String: ids[i], Valid: ids[i] != ""}
		res, err := stmt.ExecContext(ctx, id, p.Device, p.Point, p.Value, p.Unit, p.At.Format(time.RFC3339))
		if err != nil {
			return 0, fmt.Errorf("insert %s: %w", ids[i], err)
		}
		n, _ := res.RowsAffected()
		inserted += int(n)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return inserted, nil
}

// summary returns the stored count per point kind and in total.
func (s *store) summary(ctx context.Context) (map[string]int, int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT point, COUNT(*) FROM readings GROUP BY point`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := map[string]int{}
	total := 0
	for rows.Next() {
		var p string
		var n int
		if err := rows.Scan(&p, &n); err != nil {
			return nil, 0, err
		}
		out[p] = n
		total += n
	}
	return out, total, rows.Err()
}
