// Package mqtttest starts real MQTT brokers for tests: a mosquitto process
// on a free loopback port with a configuration and persistence directory of
// its own, and a loopback TCP proxy that can cut connections. The TCK,
// driver and reliability tests of the MQTT adapter share it.
//
// # Mosquitto
//
// StartMosquitto writes a config under a fresh temporary directory
// (persistence on, anonymous clients allowed, listener on 127.0.0.1 only),
// starts /usr/sbin/mosquitto (or $MOSQUITTO) and waits until it answers an
// MQTT CONNECT. It runs as the test's user (the config says so: when root,
// mosquitto would otherwise drop to user "mosquitto", which clears the
// parent-death signal); the directory is still handed to user "mosquitto"
// when it exists. The process dies with the test process (Linux
// Pdeathsig) and is stopped by its PID, never by name.
//
// # Availability
//
// Require reports a missing mosquitto binary as a skip, or as a failure
// when CI=true.
package mqtttest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/internal/freeport"
	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

// MosquittoBinary returns the mosquitto executable: $MOSQUITTO when set,
// else "mosquitto" on PATH, else /usr/sbin/mosquitto.
func MosquittoBinary() (string, error) {
	if p := os.Getenv("MOSQUITTO"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	const deb = "/usr/sbin/mosquitto"
	if _, err := os.Stat(deb); err == nil {
		return deb, nil
	}
	return "", errors.New("mosquitto not found (install the Debian package mosquitto, or set MOSQUITTO)")
}

// Require starts a mosquitto for t and stops it when t ends. Without a
// mosquitto binary it skips t, or fails it when the environment has
// CI=true.
func Require(t testing.TB, opts MosquittoOptions) *Mosquitto {
	t.Helper()
	if _, err := MosquittoBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := StartMosquitto(ctx, opts)
	if err != nil {
		t.Fatalf("start mosquitto: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("stop mosquitto: %v", err)
		}
	})
	return m
}

// MosquittoOptions tune the broker. The zero value is what the adapter's
// tests use.
type MosquittoOptions struct {
	// MaxQueuedMessages is mosquitto's max_queued_messages: QoS 1 messages
	// queued per client beyond those in flight. Default 100000 (mosquitto's
	// own default, 1000, silently drops the excess).
	MaxQueuedMessages int
	// AutosaveInterval is how often (seconds) the persistence file is
	// written while running. Default 1. A graceful stop always saves.
	AutosaveInterval int
	// Extra lines appended to the config.
	Extra []string
	// PerListenerSettings writes per_listener_settings true first, so that
	// each listener in Extra has its own authentication (allow_anonymous,
	// password_file, use_identity_as_username). The default listener stays
	// anonymous. Default false.
	PerListenerSettings bool
	// TLS adds TLS listeners (see TLSListener). Default none.
	TLS []TLSListener
}

// TLSListener is a TLS listener of a mosquitto started by StartMosquitto,
// on 127.0.0.1 and a free port (Mosquitto.TLSAddr). Each sets
// PerListenerSettings.
type TLSListener struct {
	// CAFile verifies client certificates; CertFile and KeyFile are the
	// server's certificate. Required.
	CAFile, CertFile, KeyFile string
	// PasswordFile, when set, is a mosquitto_passwd file the listener
	// checks user names and passwords against (see PasswordFile);
	// anonymous clients are then refused.
	PasswordFile string
	// CertificateIdentity requires a client certificate and takes its
	// common name as the user name (require_certificate,
	// use_identity_as_username); anonymous clients are refused.
	CertificateIdentity bool

	port int
}

// lines returns the listener's config lines.
func (l *TLSListener) lines() []string {
	out := []string{
		fmt.Sprintf("listener %d 127.0.0.1", l.port),
		"cafile " + l.CAFile, "certfile " + l.CertFile, "keyfile " + l.KeyFile,
	}
	switch {
	case l.CertificateIdentity:
		out = append(out, "require_certificate true", "use_identity_as_username true", "allow_anonymous false")
	case l.PasswordFile != "":
		out = append(out, "password_file "+l.PasswordFile, "allow_anonymous false")
	default:
		out = append(out, "allow_anonymous true")
	}
	return out
}

// PasswordFile writes a mosquitto password file for user and password
// into dir with mosquitto_passwd and returns its path.
func PasswordFile(dir, user, password string) (string, error) {
	bin, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		return "", fmt.Errorf("mosquitto_passwd not found (it comes with the Debian package mosquitto): %w", err)
	}
	path := filepath.Join(dir, "mosquitto.passwd")
	out, err := exec.Command(bin, "-b", "-c", path, user, password).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mosquitto_passwd: %w: %s", err, out)
	}
	return path, nil
}

// Mosquitto is a running (or stopped, restartable) mosquitto process.
type Mosquitto struct {
	bin      string
	dir      string
	port     int
	tlsPorts []int
	conf     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
}

// StartMosquitto starts mosquitto on a free loopback port and returns once
// it accepts MQTT connections or ctx is done.
func StartMosquitto(ctx context.Context, opts MosquittoOptions) (*Mosquitto, error) {
	bin, err := MosquittoBinary()
	if err != nil {
		return nil, err
	}
	port, err := freeport.One()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-mosquitto-")
	if err != nil {
		return nil, err
	}
	m := &Mosquitto{bin: bin, dir: dir, port: port, conf: filepath.Join(dir, "mosquitto.conf")}
	for i := range opts.TLS {
		if opts.TLS[i].port, err = freeport.One(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		m.tlsPorts = append(m.tlsPorts, opts.TLS[i].port)
	}
	if err := m.writeConfig(opts); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

func (m *Mosquitto) writeConfig(opts MosquittoOptions) error {
	if opts.MaxQueuedMessages == 0 {
		opts.MaxQueuedMessages = 100000
	}
	if opts.AutosaveInterval == 0 {
		opts.AutosaveInterval = 1
	}
	head := ""
	if opts.PerListenerSettings || len(opts.TLS) > 0 {
		head = "per_listener_settings true\n"
	}
	conf := head + fmt.Sprintf(`# written by sluice mqtttest
listener %d 127.0.0.1
allow_anonymous true
persistence true
persistence_location %s/
autosave_interval %d
max_queued_messages %d
log_dest file %s
log_type error
log_type warning
log_type notice
`, m.port, m.dir, opts.AutosaveInterval, opts.MaxQueuedMessages, filepath.Join(m.dir, "mosquitto.log"))
	if me, err := user.Current(); err == nil {
		// Stay the current user (root included): switching user would
		// clear the parent-death signal that ends the broker with the
		// test process.
		conf += "user " + me.Username + "\n"
	}
	for _, l := range opts.Extra {
		conf += l + "\n"
	}
	for i := range opts.TLS {
		for _, l := range opts.TLS[i].lines() {
			conf += l + "\n"
		}
	}
	if err := os.WriteFile(m.conf, []byte(conf), 0o644); err != nil {
		return err
	}
	return chownToMosquitto(m.dir)
}

// chownToMosquitto hands dir to user "mosquitto" when running as root:
// mosquitto started as root drops to that user and must be able to write
// its persistence file and log.
func chownToMosquitto(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("mosquitto")
	if err != nil {
		return nil // no such user: mosquitto keeps running as root
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
}

// Addr is the broker's host:port.
func (m *Mosquitto) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port)) }

// TLSAddr is the host:port of the i-th TLS listener of
// MosquittoOptions.TLS.
func (m *Mosquitto) TLSAddr(i int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.tlsPorts[i]))
}

// URL is the broker's mqtt:// URL.
func (m *Mosquitto) URL() string { return "mqtt://" + m.Addr() }

// PID is the running broker's process id, 0 when it is stopped.
func (m *Mosquitto) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return testbroker.PID(m.cmd)
}

// Dir is the broker's config, persistence and log directory.
func (m *Mosquitto) Dir() string { return m.dir }

// Log returns the broker's log so far (for failure messages).
func (m *Mosquitto) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "mosquitto.log"))
	return string(b)
}

// Start (re)starts a stopped broker on the same port and directory, so a
// persisted session survives, and waits until it answers.
func (m *Mosquitto) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.cmd != nil {
		m.mu.Unlock()
		return errors.New("mosquitto already running")
	}
	cmd := exec.Command(m.bin, "-c", m.conf)
	cmd.Dir = m.dir
	cmd.SysProcAttr = procAttr()
	// Pdeathsig fires when the thread that started the child exits: keep
	// this goroutine on one thread while starting it. (Go does not end
	// threads whose goroutines unlock them, so the parent thread lives as
	// long as the process.)
	runtime.LockOSThread()
	err := cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("start %s: %w", m.bin, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()

	if err := waitMQTT(ctx, m.Addr(), done); err != nil {
		_ = m.stop(syscall.SIGKILL)
		return fmt.Errorf("mosquitto on %s did not come up: %w\nlog:\n%s", m.Addr(), err, m.Log())
	}
	return nil
}

// Stop stops the broker gracefully (SIGTERM: mosquitto writes its
// persistence file) and waits for the process to exit.
func (m *Mosquitto) Stop() error { return m.stop(syscall.SIGTERM) }

// Kill kills the broker (SIGKILL: state since the last autosave is lost).
func (m *Mosquitto) Kill() error { return m.stop(syscall.SIGKILL) }

// Restart stops the broker gracefully and starts it again.
func (m *Mosquitto) Restart(ctx context.Context) error {
	if err := m.Stop(); err != nil {
		return err
	}
	return m.Start(ctx)
}

func (m *Mosquitto) stop(sig syscall.Signal) error {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd, m.done = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("mosquitto pid %d ignored %v for 20s; killed", cmd.Process.Pid, sig)
	}
}

// Close stops the broker and removes its directory.
func (m *Mosquitto) Close() error {
	err := m.Stop()
	if rmErr := os.RemoveAll(m.dir); err == nil {
		err = rmErr
	}
	return err
}
