// Package redistest starts a private redis-server for tests: a free port on
// 127.0.0.1, its own temporary directory, a bounded wait for readiness, and
// a stop by PID. The server receives SIGKILL when the test process dies
// (Pdeathsig), so no broker outlives a test run.
//
// # Requirements
//
// The Debian package redis-server (Redis 7.0). The binary is looked up in
// $REDIS_SERVER, then /usr/bin/redis-server, then $PATH.
//
// # Use
//
//	srv := redistest.Own(t, redistest.Options{Durable: true})
//	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
//
// Durable servers run with appendonly yes and appendfsync always, so every
// write acknowledged to a client is on disk, and Restart brings the server
// back on the same port from its append-only file. Non-durable servers keep
// nothing on disk (the speed configuration).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/internal/freeport"
	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

// ErrNotInstalled is returned by Start when no redis-server is installed.
var ErrNotInstalled = errors.New("redistest: redis-server is not installed (apt-get install redis-server)")

// Options tune a server. The zero value is a fast, non-persistent server.
type Options struct {
	// Durable turns on appendonly yes + appendfsync always.
	Durable bool
	// StartTimeout bounds the wait for the server to answer PING.
	// Default 15s.
	StartTimeout time.Duration
	// Config lines appended to the generated redis.conf.
	Config []string
	// TLS, when set, adds a TLS port on 127.0.0.1 (Server.TLSAddr) with
	// these PEM files. The plaintext port stays (for the readiness check).
	TLS *TLSOptions
}

// TLSOptions configure the TLS port of a server.
type TLSOptions struct {
	// CAFile verifies client certificates; CertFile and KeyFile are the
	// server's certificate. Required.
	CAFile, CertFile, KeyFile string
	// RequireClientCertificate makes every TLS client present a
	// certificate signed by CAFile (tls-auth-clients yes). Default false:
	// optional (tls-auth-clients optional).
	RequireClientCertificate bool
}

// Server is one running redis-server owned by the test process.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// URL is redis://Addr/0.
	URL string
	// Dir is the server's working directory (AOF, log).
	Dir string
	// TLSAddr is host:port of the TLS port, when Options.TLS was given.
	TLSAddr string

	opts Options
	bin  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	waitEr error
}

// Binary returns the redis-server executable or ErrNotInstalled.
func Binary() (string, error) {
	for _, p := range []string{os.Getenv("REDIS_SERVER"), "/usr/bin/redis-server"} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	return "", ErrNotInstalled
}

// Start launches a server and waits until it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 15 * time.Second
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	port, err := freeport.One()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, opts: opts, bin: bin}
	s.URL = "redis://" + s.Addr + "/0"
	tlsPort := 0
	if opts.TLS != nil {
		if tlsPort, err = freeport.One(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.TLSAddr = "127.0.0.1:" + strconv.Itoa(tlsPort)
	}
	if err := s.writeConfig(port, tlsPort); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.launch(ctx); err != nil {
		s.kill()
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) writeConfig(port, tlsPort int) error {
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"protected-mode yes",
		"daemonize no",
		"dir " + s.Dir,
		"logfile " + filepath.Join(s.Dir, "redis.log"),
		"save \"\"",
		"databases 1",
	}
	if s.opts.Durable {
		lines = append(lines, "appendonly yes", "appendfsync always", "appenddirname appendonly")
	} else {
		lines = append(lines, "appendonly no")
	}
	if t := s.opts.TLS; t != nil {
		auth := "optional"
		if t.RequireClientCertificate {
			auth = "yes"
		}
		lines = append(lines, "tls-port "+strconv.Itoa(tlsPort), "tls-cert-file "+t.CertFile, "tls-key-file "+t.KeyFile,
			"tls-ca-cert-file "+t.CAFile, "tls-auth-clients "+auth)
	}
	lines = append(lines, s.opts.Config...)
	return os.WriteFile(filepath.Join(s.Dir, "redis.conf"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (s *Server) launch(ctx context.Context) error {
	cmd := exec.Command(s.bin, filepath.Join(s.Dir, "redis.conf"))
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitEr = err
		s.mu.Unlock()
		close(exited)
	}()
	wctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := ping(s.Addr); err == nil {
			return nil
		}
		select {
		case <-exited:
			s.mu.Lock()
			err := s.waitEr
			s.mu.Unlock()
			return fmt.Errorf("redistest: redis-server exited: %v\n--- log tail ---\n%s", err, s.LogTail(2048))
		case <-wctx.Done():
			return fmt.Errorf("redistest: redis-server on %s did not answer PING within %v: %w\n--- log tail ---\n%s", s.Addr, s.opts.StartTimeout, wctx.Err(), s.LogTail(2048))
		case <-tick.C:
		}
	}
}

// ping sends one inline PING and expects +PONG (and not -LOADING).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Kill sends SIGKILL to the server and waits for it to exit (a crash: only
// what the append-only file holds survives).
func (s *Server) Kill() error {
	s.kill()
	return nil
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart kills the server and starts it again on the same port and
// directory; a Durable server reloads its append-only file.
func (s *Server) Restart(ctx context.Context) error {
	s.kill()
	return s.launch(ctx)
}

// PID is the process id of the server's last start (0 before one).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return testbroker.PID(s.cmd)
}

// Stop kills the server and removes its directory. It is idempotent.
func (s *Server) Stop() error {
	s.kill()
	return os.RemoveAll(s.Dir)
}

// LogTail returns the last n bytes of the server log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var shared = testbroker.Shared[*Server]{Name: "redistest", NotInstalled: ErrNotInstalled,
	Start: func() (*Server, error) { return Start(context.Background(), Options{Durable: true}) }}

// Shared returns the package-wide durable server, starting it on first use.
// A test binary that calls Shared must call StopShared from TestMain.
// A missing redis-server skips t, or fails it when CI=true.
func Shared(t testing.TB) *Server {
	t.Helper()
	return shared.Get(t)
}

// StopShared stops the server started by Shared, if any.
func StopShared() error { return shared.Stop() }

// Own starts a server for t alone and stops it when t ends.
func Own(t testing.TB, opts Options) *Server {
	t.Helper()
	return testbroker.Own(t, "redistest", ErrNotInstalled, func() (*Server, error) { return Start(context.Background(), opts) })
}
