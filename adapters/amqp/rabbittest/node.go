// Package rabbittest starts a private RabbitMQ node for tests: free loopback
// ports, its own Erlang port mapper, config, data, logs and HOME under a
// temporary directory, and a stop by PID. It also offers a loopback TCP
// proxy that can cut connections, for fault tests.
//
// # Requirements
//
// The Debian package rabbitmq-server (RabbitMQ 3.10 with Erlang). The
// scripts are looked up in $RABBITMQ_BIN_DIR, then /usr/lib/rabbitmq/bin,
// then $PATH. Nothing listens outside 127.0.0.1 (epmd also answers on ::1).
//
// # Use
//
//	node, err := rabbittest.Start(ctx, rabbittest.Options{})
//	if err != nil { ... }
//	defer node.Stop()
//	conn, _ := amqp091.Dial(node.URL)
//
// Start returns only when the node accepts AMQP connections. StopApp and
// StartApp drive `rabbitmqctl stop_app` / `start_app` against this node
// only, for restart tests.
package rabbittest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/internal/freeport"
	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

// ErrNotInstalled is returned by Start when no RabbitMQ server is installed.
var ErrNotInstalled = errors.New("rabbittest: rabbitmq-server is not installed (apt-get install rabbitmq-server)")

// Options tune a node. The zero value is a sensible default.
type Options struct {
	// StartTimeout bounds how long Start waits for the node to answer.
	// Default 4 minutes.
	StartTimeout time.Duration
	// Config is appended to the generated rabbitmq.conf (new-style
	// sysctl format). Default: nothing.
	Config string
	// Dir is the parent of the node's temporary directory. Default
	// os.TempDir().
	Dir string
	// TLS, when set, adds a TLS listener on 127.0.0.1 (Node.TLSPort,
	// Node.TLSURL) and enables SASL EXTERNAL (the rabbitmq_auth_mechanism_ssl
	// plugin) with the client certificate's common name as the user name.
	// Default: plaintext only.
	TLS *TLSOptions
}

// TLSOptions configure the TLS listener of a node, from PEM files.
type TLSOptions struct {
	// CAFile verifies client certificates (verify_peer; a client without
	// one is admitted, for PLAIN over TLS). CertFile and KeyFile are the
	// server's certificate. Required.
	CAFile, CertFile, KeyFile string
	// SNI maps server names to other certificates ([2]string{cert, key}),
	// served to clients that ask for that name: one node can then present
	// an expired certificate or one for another host.
	SNI map[string][2]string
}

// Node is one running RabbitMQ node owned by the test process.
type Node struct {
	// URL is the AMQP URL of the node (guest/guest on 127.0.0.1).
	URL string
	// Name is the Erlang node name (sluice-<pid>-<n>@localhost).
	Name string
	// Port is the AMQP port.
	Port int
	// TLSPort and TLSURL are the TLS listener's port and amqps URL
	// (without credentials), when Options.TLS was given.
	TLSPort int
	TLSURL  string

	dir          string
	binDir       string
	startTimeout time.Duration // Options.StartTimeout: bounds Restart's start_app
	env          []string      // the test process's environment plus own
	own          []string      // the node's own variables

	mu     sync.Mutex
	server *exec.Cmd
	epmd   *exec.Cmd
	exited chan struct{} // closed when the server script exits
	waitEr error
	epmdEx chan struct{}
	stop   sync.Once
	stopEr error
}

// BinDir returns the directory holding rabbitmq-server and rabbitmqctl, or
// ErrNotInstalled.
func BinDir() (string, error) {
	var candidates []string
	if d := os.Getenv("RABBITMQ_BIN_DIR"); d != "" {
		candidates = append(candidates, d)
	}
	candidates = append(candidates, "/usr/lib/rabbitmq/bin")
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "rabbitmq-server")) && isExec(filepath.Join(d, "rabbitmqctl")) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start launches a node and waits until it accepts AMQP connections, ctx is
// done or Options.StartTimeout passed. On failure it stops what it started
// and returns the tail of the node's log in the error.
func Start(ctx context.Context, opts Options) (*Node, error) {
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("epmd"); err != nil {
		return nil, fmt.Errorf("%w: epmd not found: %v", ErrNotInstalled, err)
	}
	if opts.StartTimeout <= 0 {
		// A node boots in about 10 s on an idle 2-core machine; with a
		// CPU hog and parallel builds beside it (load average 20) it
		// took longer than 90 s, and every test of the package failed.
		opts.StartTimeout = 4 * time.Minute
	}
	dir, err := os.MkdirTemp(opts.Dir, "rabbittest-")
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Take(4)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := &Node{
		Name:         fmt.Sprintf("sluice-%d-%s@localhost", os.Getpid(), filepath.Base(dir)[len("rabbittest-"):]),
		Port:         ports[0],
		dir:          dir,
		binDir:       binDir,
		startTimeout: opts.StartTimeout,
		epmdEx:       make(chan struct{}),
	}
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
	if opts.TLS != nil {
		n.TLSPort = ports[3]
		n.TLSURL = fmt.Sprintf("amqps://127.0.0.1:%d/", n.TLSPort)
	}
	if err := n.writeFiles(opts.Config, opts.TLS); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n.env = n.environ(ports[1], ports[2])
	if err := n.launch(); err != nil {
		n.Stop()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := n.waitAMQP(wctx); err != nil {
		logTail := n.LogTail(4096)
		n.Stop()
		return nil, fmt.Errorf("rabbittest: node did not start: %w\n--- log tail ---\n%s", err, logTail)
	}
	return n, nil
}

func (n *Node) writeFiles(extra string, t *TLSOptions) error {
	home := filepath.Join(n.dir, "home")
	for _, d := range []string{home, filepath.Join(n.dir, "mnesia"), filepath.Join(n.dir, "log")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	cookie := "SLUICE" + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
		return err
	}
	conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
loopback_users = none
log.console = false
log.file.level = info
`, n.Port) + tlsConf(n.TLSPort, t) + extra + "\n"
	if err := os.WriteFile(filepath.Join(n.dir, "rabbitmq.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "advanced.config"), []byte(advancedConf(t)), 0o600); err != nil {
		return err
	}
	plugins := "[].\n"
	if t != nil {
		plugins = "[rabbitmq_auth_mechanism_ssl].\n"
	}
	return os.WriteFile(filepath.Join(n.dir, "enabled_plugins"), []byte(plugins), 0o600)
}

// tlsConf is the rabbitmq.conf part of a TLS listener: its address and
// the SASL mechanisms (EXTERNAL with the certificate's common name).
func tlsConf(port int, t *TLSOptions) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf(`listeners.ssl.1 = 127.0.0.1:%d
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
ssl_handshake_timeout = 5000
`, port)
}

// advancedConf is the advanced.config holding the TLS listener's
// ssl_options (Erlang terms: sni_hosts has no rabbitmq.conf form).
func advancedConf(t *TLSOptions) string {
	if t == nil {
		return "[].\n"
	}
	q := strconv.Quote
	var sni []string
	for name, files := range t.SNI {
		sni = append(sni, fmt.Sprintf("{%s, [{certfile, %s}, {keyfile, %s}]}", q(name), q(files[0]), q(files[1])))
	}
	sort.Strings(sni)
	return fmt.Sprintf(`[{rabbit, [{ssl_options, [{cacertfile, %s}, {certfile, %s}, {keyfile, %s},
  {verify, verify_peer}, {fail_if_no_peer_cert, false}, {sni_hosts, [%s]}]}]}].
`, q(t.CAFile), q(t.CertFile), q(t.KeyFile), strings.Join(sni, ", "))
}

func (n *Node) environ(distPort, epmdPort int) []string {
	d := n.dir
	loopback := "-kernel inet_dist_use_interface {127,0,0,1}"
	set := map[string]string{
		"HOME":                                home(d),
		"RABBITMQ_NODENAME":                   n.Name,
		"RABBITMQ_NODE_IP_ADDRESS":            "127.0.0.1",
		"RABBITMQ_NODE_PORT":                  strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT":                  strconv.Itoa(distPort),
		"ERL_EPMD_PORT":                       strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS":                    "127.0.0.1",
		"RABBITMQ_CONFIG_FILE":                filepath.Join(d, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE":       filepath.Join(d, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE":              filepath.Join(d, "no-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE":       filepath.Join(d, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE":                filepath.Join(d, "mnesia"),
		"RABBITMQ_LOG_BASE":                   filepath.Join(d, "log"),
		"RABBITMQ_PLUGINS_EXPAND_DIR":         filepath.Join(d, "plugins-expand"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": loopback,
		"RABBITMQ_CTL_ERL_ARGS":               loopback,
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours || strings.HasPrefix(k, "RABBITMQ_") && k != "RABBITMQ_BIN_DIR" {
			continue
		}
		env = append(env, kv)
	}
	n.own = []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	for k, v := range set {
		env = append(env, k+"="+v)
		n.own = append(n.own, k+"="+v)
	}
	sort.Strings(n.own)
	return env
}

func home(dir string) string { return filepath.Join(dir, "home") }

func (n *Node) epmdPort() string {
	for _, kv := range n.env {
		if v, ok := strings.CutPrefix(kv, "ERL_EPMD_PORT="); ok {
			return v
		}
	}
	return ""
}

// launch starts epmd and the server script, both as children that receive
// SIGTERM if the test process dies.
func (n *Node) launch() error {
	epmd := exec.Command("epmd", "-port", n.epmdPort(), "-address", "127.0.0.1")
	epmd.Env = n.env
	if f, err := os.Create(filepath.Join(n.dir, "epmd.out")); err == nil {
		epmd.Stdout, epmd.Stderr = f, f
		defer f.Close() // the child has its own descriptor
	}
	epmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := epmd.Start(); err != nil {
		return fmt.Errorf("rabbittest: start epmd: %w", err)
	}
	n.mu.Lock()
	n.epmd = epmd
	n.mu.Unlock()
	go func() { epmd.Wait(); close(n.epmdEx) }()
	return n.launchServer()
}

// launchServer starts the server script (which execs the Erlang VM) in a
// process group of its own, its output appended to server.out.
func (n *Node) launchServer() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	srv := exec.Command(filepath.Join(n.binDir, "rabbitmq-server"))
	srv.Dir = n.dir
	srv.Env = n.env
	srv.Stdout, srv.Stderr = logf, logf
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := srv.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("rabbittest: start rabbitmq-server: %w", err)
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.server, n.exited = srv, exited
	n.mu.Unlock()
	go func() {
		err := srv.Wait()
		logf.Close()
		n.mu.Lock()
		n.waitEr = err
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Crash kills the node's Erlang VM and everything in its process group
// with SIGKILL — no clean shutdown: what the broker had not synced to disk
// is gone, as on a power loss — and starts it again on the same data
// directory, returning once it accepts AMQP connections (bounded by ctx
// and Options.StartTimeout).
func (n *Node) Crash(ctx context.Context) error {
	n.mu.Lock()
	srv, exited := n.server, n.exited
	n.mu.Unlock()
	if srv == nil || srv.Process == nil {
		return errors.New("rabbittest: crash: the node is not running")
	}
	if err := syscall.Kill(-srv.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("rabbittest: crash: kill process group %d: %w", srv.Process.Pid, err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return fmt.Errorf("rabbittest: crash: the killed node did not exit: %w", ctx.Err())
	}
	if err := n.launchServer(); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.startTimeout)
	defer cancel()
	if err := n.waitAMQP(sctx); err != nil {
		return fmt.Errorf("rabbittest: the node did not start again after the crash: %w\n--- log tail ---\n%s", err, n.LogTail(4096))
	}
	return nil
}

// waitAMQP polls an AMQP handshake until it succeeds, the server exits or
// ctx is done.
func (n *Node) waitAMQP(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	for {
		if err := n.ping(); err == nil {
			return nil
		}
		select {
		case <-exited:
			n.mu.Lock()
			err := n.waitEr
			n.mu.Unlock()
			return fmt.Errorf("server exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ping opens and closes one AMQP connection.
func (n *Node) ping() error {
	c, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return c.Close()
}

// Ctl runs rabbitmqctl against this node with args and returns its output.
func (n *Node) Ctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.binDir, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env
	cmd.Dir = n.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// CtlCommand returns an argv that runs rabbitmqctl against this node with
// args from any process (through env(1)), e.g. for Watermill's
// Features.RestartServiceCommand.
func (n *Node) CtlCommand(args ...string) []string {
	argv := append([]string{"env", "-i"}, n.own...)
	argv = append(argv, filepath.Join(n.binDir, "rabbitmqctl"), "-n", n.Name)
	return append(argv, args...)
}

// RestartCommand returns an argv that restarts the RabbitMQ application
// of this node from any process (sh -c "rabbitmqctl stop_app &&
// rabbitmqctl start_app && rabbitmqctl await_startup", under flock(1)
// when available so that overlapping restarts run one after the other),
// e.g. for Watermill's Features.RestartServiceCommand.
func (n *Node) RestartCommand() []string {
	quote := func(argv []string) string {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		return strings.Join(q, " ")
	}
	script := quote(n.CtlCommand("stop_app")) + " && " + quote(n.CtlCommand("start_app")) +
		" && " + quote(n.CtlCommand("await_startup"))
	if _, err := exec.LookPath("flock"); err == nil {
		// Callers may restart concurrently (Watermill's suite does):
		// one restart at a time, or a stop_app lands in a start_app.
		return []string{"flock", filepath.Join(n.dir, "restart.lock"), "sh", "-c", script}
	}
	return []string{"sh", "-c", script}
}

// AddUser adds a user with password and every permission on the default
// virtual host.
func (n *Node) AddUser(ctx context.Context, user, password string) error {
	if _, err := n.Ctl(ctx, "add_user", user, password); err != nil {
		return err
	}
	_, err := n.Ctl(ctx, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	return err
}

// StopApp stops the RabbitMQ application (the Erlang node stays up): every
// client connection is closed and the AMQP port stops listening.
func (n *Node) StopApp(ctx context.Context) error {
	_, err := n.Ctl(ctx, "stop_app")
	return err
}

// StartApp starts the RabbitMQ application again and waits until it
// accepts AMQP connections.
func (n *Node) StartApp(ctx context.Context) error {
	if _, err := n.Ctl(ctx, "start_app"); err != nil {
		return err
	}
	return n.waitAMQP(ctx)
}

// Restart is StopApp then StartApp. ctx bounds the stop; the start is
// bounded by Options.StartTimeout instead, so that a restart whose caller
// gave up still brings the application back: a node left stopped would
// fail every test after it that uses the node (under load a restart took
// longer than the fault kit's 60 s, rabbitmqctl start_app was killed, and
// every later scenario found the port closed).
func (n *Node) Restart(ctx context.Context) error {
	if err := n.StopApp(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.startTimeout)
	defer cancel()
	if err := n.StartApp(sctx); err != nil {
		return err
	}
	return ctx.Err()
}

// LogTail returns up to max bytes from the end of the node's logs.
func (n *Node) LogTail(max int) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
	files = append(files, filepath.Join(n.dir, "server.out"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), data)
	}
	return b.String()
}

// PID is the process id of the node's server script (the broker runs
// under it), 0 when it is not running. The bench reads the broker's CPU
// time from it and its descendants.
func (n *Node) PID() int {
	if n.server == nil || n.server.Process == nil {
		return 0
	}
	return n.server.Process.Pid
}

// Stop stops the node by PID (SIGTERM to the server script, which shuts
// RabbitMQ down cleanly; SIGKILL after 30s), then epmd, and removes the
// node's directory. It is idempotent.
func (n *Node) Stop() error {
	n.stop.Do(func() {
		n.mu.Lock()
		srv, epmd, exited := n.server, n.epmd, n.exited
		n.mu.Unlock()
		if srv != nil {
			n.stopEr = testbroker.Terminate(srv.Process, exited, 30*time.Second)
		}
		if epmd != nil {
			if err := testbroker.Terminate(epmd.Process, n.epmdEx, 5*time.Second); err != nil && n.stopEr == nil {
				n.stopEr = err
			}
		}
		if err := os.RemoveAll(n.dir); err != nil && n.stopEr == nil {
			n.stopEr = err
		}
	})
	return n.stopEr
}
