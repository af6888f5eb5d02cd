package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Dialect is the SQL dialect of an inbox's database.
type Dialect string

const (
	// SQLite (modernc.org/sqlite, github.com/mattn/go-sqlite3).
	SQLite Dialect = "sqlite"
	// Postgres (github.com/jackc/pgx/v5/stdlib, github.com/lib/pq).
	Postgres Dialect = "postgres"
)

// detect returns the dialect of db's driver, or an error naming it.
func detect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	switch {
	case strings.Contains(pkg, "sqlite"):
		return SQLite, nil
	case strings.Contains(pkg, "jackc/pgx"), strings.Contains(pkg, "lib/pq"):
		return Postgres, nil
	}
	return "", fmt.Errorf("inbox: unknown SQL driver %s.%s: set Options.Dialect to %q or %q if the database is one of them (other databases are not supported)", pkg, t.Name(), SQLite, Postgres)
}

// statements are an inbox's SQL, for its table and dialect.
type statements struct {
	create []string
	lock   string // table name; serialises create where IF NOT EXISTS races
	insert string // id, topic, processed_at; affects 0 rows for a known id
	seen   string // id
	purge  string // processed_at
}

func (d Dialect) statements(table string) (statements, error) {
	index := table[strings.LastIndex(table, ".")+1:] + "_processed_at"
	switch d {
	case SQLite:
		return statements{
			create: []string{
				`CREATE TABLE IF NOT EXISTS ` + table + ` (id TEXT PRIMARY KEY, topic TEXT NOT NULL, processed_at TIMESTAMP NOT NULL)`,
				`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + table + ` (processed_at)`,
			},
			insert: `INSERT INTO ` + table + ` (id, topic, processed_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			seen:   `SELECT 1 FROM ` + table + ` WHERE id = ?`,
			purge:  `DELETE FROM ` + table + ` WHERE processed_at < ?`,
		}, nil
	case Postgres:
		return statements{
			create: []string{
				`CREATE TABLE IF NOT EXISTS ` + table + ` (id TEXT PRIMARY KEY, topic TEXT NOT NULL, processed_at TIMESTAMPTZ NOT NULL)`,
				`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + table + ` (processed_at)`,
			},
			// Two sessions creating the same table at once both pass IF
			// NOT EXISTS and one fails on pg_type: a transaction-scoped
			// advisory lock on the name makes the second wait and find it.
			lock:   `SELECT pg_advisory_xact_lock(hashtext($1))`,
			insert: `INSERT INTO ` + table + ` (id, topic, processed_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			seen:   `SELECT 1 FROM ` + table + ` WHERE id = $1`,
			purge:  `DELETE FROM ` + table + ` WHERE processed_at < $1`,
		}, nil
	}
	return statements{}, fmt.Errorf("inbox: unknown Options.Dialect %q: use %q or %q", string(d), SQLite, Postgres)
}

// timeArg is t as the dialect stores it: SQLite has no time type, so it
// gets a fixed-width UTC text that sorts like the time.
func (d Dialect) timeArg(t time.Time) any {
	if d == SQLite {
		return t.UTC().Format("2006-01-02 15:04:05.000000000")
	}
	return t.UTC()
}

// retryable reports a transaction that failed only because another one
// ran at the same time: a Postgres serialization failure (40001) or
// deadlock (40P01), SQLite busy or locked. It is tried again.
func retryable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "40001", "40P01":
			return true
		}
	}
	var code interface{ Code() int }
	if errors.As(err, &code) {
		switch code.Code() & 0xff { // primary result code
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}
