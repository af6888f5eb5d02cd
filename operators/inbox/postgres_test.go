package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
)

// pgServer is a PostgreSQL server owned by one test: a cluster made by
// initdb in t.TempDir(), listening on 127.0.0.1 on a free port and on a
// unix socket in that directory, stopped by PID when the test ends.
type pgServer struct {
	Port   int
	Socket string // the unix socket directory
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// pgBinDir is where Debian's postgresql-15 installs its programs;
// $PG_BIN overrides it.
func pgBinDir() string {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// startPostgres starts a server for t, or skips t when PostgreSQL is not
// installed (fails it when CI=true).
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	bin := pgBinDir()
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("PostgreSQL is not installed (%v): apt-get install postgresql", err)
			}
			t.Skipf("skipping: PostgreSQL is not installed (%v): apt-get install postgresql (set CI=true to make this a failure)", err)
		}
	}
	dir := t.TempDir()
	cred, err := pgCredential(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "sluice", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port, err := pgFreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &pgServer{Port: port, Socket: dir, exited: make(chan struct{}), log: filepath.Join(dir, "postgres.log")}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=50")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.stop)
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("postgres did not start: %v\n%s", err, s.logTail())
	}
	return s
}

// pgCredential returns who runs the server: this process, or the
// postgres (else nobody) user when this process is root, which PostgreSQL
// refuses; dir is then given to that user.
func pgCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("running as root, and no postgres or nobody user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	// t.TempDir's parent is private to this process; let the server user
	// through it (not read it).
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func pgFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DSN returns a pgx DSN for database name over the unix socket.
func (s *pgServer) DSN(name string) string {
	return fmt.Sprintf("host=%s port=%d user=sluice dbname=%s sslmode=disable", s.Socket, s.Port, name)
}

// waitReady waits, bounded by ctx, until the server accepts a query.
func (s *pgServer) waitReady(ctx context.Context) error {
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// stop ends the server by its PID: SIGINT (a fast shutdown), then SIGKILL
// if it has not exited after 30s.
func (s *pgServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *pgServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// database creates a fresh database on s and returns its target.
func (s *pgServer) database(t *testing.T, name string) dbTarget {
	t.Helper()
	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return dbTarget{Driver: "pgx", DSN: s.DSN(name), Dialect: inbox.Postgres}
}

// The exactly-once tests on PostgreSQL 15: duplicates under concurrent
// workers, a consumer stopped between commit and ack (mem), a consumer
// SIGKILLed between commit and ack (redis), serialization failures under
// SERIALIZABLE, and Purge.
func TestPostgres(t *testing.T) {
	pg := startPostgres(t)
	t.Run("detects-dialect", func(t *testing.T) {
		db := pg.database(t, "detect").open(t)
		ib, err := inbox.New(testCtx(t), db, inbox.Options{Table: "public.inbox"})
		if err != nil {
			t.Fatal(err)
		}
		if ib.Dialect() != inbox.Postgres {
			t.Errorf("dialect %q, want postgres", ib.Dialect())
		}
		if _, err := ib.Purge(testCtx(t), time.Hour); err != nil {
			t.Errorf("Purge: %v", err)
		}
	})
	t.Run("concurrent-new", func(t *testing.T) {
		// Eight processes starting at once each create the table: CREATE
		// TABLE IF NOT EXISTS alone races in PostgreSQL (a unique violation
		// on pg_type), so New serialises the creation.
		db := pg.database(t, "concurrentnew").open(t)
		db.SetMaxOpenConns(8)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := inbox.New(testCtx(t), db, inbox.Options{Table: "public.racing"})
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Errorf("New beside seven others: %v", err)
			}
		}
	})
	t.Run("concurrent-duplicates", func(t *testing.T) {
		db := pg.database(t, "concurrent").open(t)
		createEffectsIn(t, db, inbox.Postgres)
		concurrentDuplicates(t, db, inbox.Postgres)
	})
	t.Run("crash-mem", func(t *testing.T) {
		db := pg.database(t, "crashmem").open(t)
		createEffectsIn(t, db, inbox.Postgres)
		crashOnMem(t, db, inbox.Postgres)
	})
	t.Run("crash-redis", func(t *testing.T) {
		srv := redistest.Own(t, redistest.Options{Durable: true})
		crashOnBroker(t, srv.URL+"?claim_min_idle=500ms", pg.database(t, "crashredis"))
	})
	t.Run("serializable", func(t *testing.T) {
		db := pg.database(t, "serializable").open(t)
		createEffectsIn(t, db, inbox.Postgres)
		serializable(t, db)
	})
}

// Two messages whose handlers read what the other writes, under
// SERIALIZABLE, with four workers: PostgreSQL aborts one of two
// overlapping transactions with 40001, the Sink runs it again, and each
// message has one effect.
func serializable(t *testing.T, db *sql.DB) {
	ctx := testCtx(t)
	a := memAdapter(t)
	ib, err := inbox.New(ctx, db, inbox.Options{Isolation: sql.LevelSerializable, Retries: 50})
	if err != nil {
		t.Fatal(err)
	}
	settled := make(settlements, 64)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce}, flow.WithObserver(settled.observe))
	inbox.Sink(p.Source(), ib, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects`).Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (msg) VALUES ($1)`, string(d.Payload))
		return err
	}, flow.Workers(4))
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	const msgs = 20
	for i := range msgs {
		send(ctx, t, a, "in", fmt.Sprintf("m-%d", i), fmt.Sprintf("v-%d", i))
	}
	for range msgs {
		if e := settled.next(ctx, t); e.Action != ports.Ack {
			t.Fatalf("%s settled with %v (%v)", e.Delivery.ID, e.Action, e.Outcome.Err)
		}
	}
	checkExactlyOnce(t, db, msgs)
	t.Logf("serializable: %+v", ib.Stats())
}
