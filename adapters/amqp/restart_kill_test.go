package amqp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

const restartChildEnv = "SLUICE_AMQP_RESTART_CHILD"

type reading struct {
	ID    string  `json:"id"`
	Value float64 `json:"value"`
}

// TestConfirmedSendsSurviveRestartAndKilledConsumers is the ingestion
// service of a user: readings sent at about 1,000/s in calls of 20 through
// adapters.Open and Send (every message whose Send failed is sent again),
// consumed by a separate process (Decode → Batch → Sink writing each batch
// to SQLite in one transaction, acked after the commit) that is SIGKILLed
// and restarted three times, while the RabbitMQ application is stopped and
// started. Every reading whose Send was confirmed must end in SQLite.
func TestConfirmedSendsSurviveRestartAndKilledConsumers(t *testing.T) {
	if os.Getenv(restartChildEnv) != "" {
		restartChild(t)
		return
	}
	if testing.Short() {
		t.Skip("30 s scenarios")
	}
	t.Run("stop_app-start_app", func(t *testing.T) {
		ingestAcrossRestart(t, func(ctx context.Context, node *rabbittest.Node) error {
			if err := node.StopApp(ctx); err != nil {
				return err
			}
			return node.StartApp(ctx)
		})
	})
	t.Run("node-killed", func(t *testing.T) {
		ingestAcrossRestart(t, func(ctx context.Context, node *rabbittest.Node) error { return node.Crash(ctx) })
	})
}

func ingestAcrossRestart(t *testing.T, restart func(context.Context, *rabbittest.Node) error) {
	node := rabbittest.Own(t, rabbittest.Options{})
	dir := t.TempDir()
	db := filepath.Join(dir, "readings.db")
	url := node.URL + os.Getenv("SLUICE_RESTART_URL_EXTRA")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pub, err := adapters.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())
	topic := ports.Topic("readings")
	if err := ports.DeclareGroup(ctx, pub, topic, "ingest"); err != nil {
		t.Fatal(err)
	}

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConfirmedSendsSurviveRestartAndKilledConsumers$")
		cmd.Env = append(os.Environ(), restartChildEnv+"=1", "SLUICE_CHILD_URL="+url, "SLUICE_CHILD_DB="+db)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	child := start()
	defer func() { kill(child) }()

	l := &confirmLedger{confirmed: map[string]bool{}}
	const n = 20000
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		mk := func(i int) ports.Message {
			b, _ := json.Marshal(reading{ID: fmt.Sprintf("r%06d", i), Value: float64(i)})
			return ports.Message{Topic: topic, Payload: b}
		}
		idOf := func(m ports.Message) string {
			var r reading
			_ = json.Unmarshal(m.Payload, &r)
			return r.ID
		}
		done <- sendStream(ctx, pub, n, 20, 20*time.Millisecond, mk, idOf, l)
	}()
	at := func(d time.Duration) {
		select {
		case <-time.After(time.Until(t0.Add(d))): // the scenario's schedule, not synchronisation
		case <-ctx.Done():
		}
	}
	at(3 * time.Second)
	kill(child)
	child = start()
	at(7 * time.Second)
	kill(child)
	child = start()
	at(9800 * time.Millisecond)
	t.Logf("%v restarting the broker", time.Since(t0))
	if err := restart(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v the broker serves again", time.Since(t0))
	at(14 * time.Second)
	kill(child)
	child = start()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%v all %d confirmed (%d failed sends retried, %d of them unroutable)", time.Since(t0), len(l.confirmed), l.failed, l.returned)

	// Wait until SQLite holds every confirmed reading or nothing new
	// arrived for 15 s.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	stored := func() map[string]bool {
		rows, err := sdb.Query(`SELECT id FROM readings`)
		if err != nil {
			return nil
		}
		defer rows.Close()
		m := map[string]bool{}
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				m[id] = true
			}
		}
		return m
	}
	last, lastAt := -1, time.Now()
	var got map[string]bool
	for {
		got = stored()
		if len(got) >= len(l.confirmed) {
			break
		}
		if len(got) != last {
			last, lastAt = len(got), time.Now()
		} else if time.Since(lastAt) > 15*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling a database, bounded above
	}
	var lost []string
	for id := range l.confirmed {
		if !got[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("LOST %d confirmed reading(s) (stored %d of %d): %v", len(lost), len(got), len(l.confirmed), lost)
	}
	t.Logf("stored %d of %d confirmed readings", len(got), len(l.confirmed))
}

// restartChild is the consumer process: Decode → Batch → Sink into SQLite.
func restartChild(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", os.Getenv("SLUICE_CHILD_DB")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS readings (id TEXT PRIMARY KEY, value REAL)`); err != nil {
		t.Fatal(err)
	}
	var a ports.Adapter
	for deadline := time.Now().Add(time.Minute); ; {
		if a, err = adapters.Open(ctx, os.Getenv("SLUICE_CHILD_URL")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the broker is restarting: try again, bounded
	}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "readings", Group: "ingest", InFlight: 200})
	rs := flow.Decode[reading](p.Source())
	bs := operators.Batch(rs, operators.BatchOptions{Size: 100, Window: 50 * time.Millisecond})
	flow.Sink(bs, func(ctx context.Context, b operators.Batched[reading]) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, r := range b.Values {
			if _, err := tx.ExecContext(ctx, `INSERT INTO readings (id, value) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`, r.ID, r.Value); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		return tx.Commit()
	})
	for deadline := time.Now().Add(time.Minute); ; {
		if err = p.Start(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the broker is restarting: try again, bounded
	}
	select {} // until SIGKILL
}
