// Package activemqtest starts a private ActiveMQ Classic broker for tests:
// a JVM of its own with a test-written activemq.xml (no JMX, persistent
// KahaDB store, scheduler support, a STOMP connector on a free 127.0.0.1
// port), its own data, temporary and log directories, and a stop by PID.
//
// # Requirements
//
// The Debian package activemq (ActiveMQ 5.17 with OpenJDK 17). The
// installation is looked up in $ACTIVEMQ_HOME, then /usr/share/activemq;
// java in $JAVA_HOME/bin, then $PATH. Nothing listens outside 127.0.0.1.
//
// # Use
//
//	b, err := activemqtest.Start(ctx, activemqtest.Options{})
//	if err != nil { ... }
//	defer b.Stop()
//	conn, _ := stomp.Dial("tcp", b.StompAddr)
//
// Start returns only when the broker completes a STOMP handshake. The JVM
// is killed when the test process dies (Pdeathsig), so a crashed test
// leaves no broker behind. Restart stops the JVM and starts it again on
// the same port and data directory (stored messages are kept).
package activemqtest

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/adapters/internal/freeport"
	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

// ErrNotInstalled is returned by Start when ActiveMQ or java is missing.
var ErrNotInstalled = errors.New("activemqtest: ActiveMQ is not installed (apt-get install activemq, or set ACTIVEMQ_HOME)")

// Options tune a broker. The zero value is a sensible default.
type Options struct {
	// StartTimeout bounds how long Start (and Restart) wait for the STOMP
	// handshake. Default 4 minutes (a JVM start on a loaded 2-core machine).
	StartTimeout time.Duration
	// Dir is the parent of the broker's temporary directory. Default
	// os.TempDir().
	Dir string
	// PolicyEntries is inserted into the broker's policyMap (XML
	// <policyEntry .../> elements). Default: none.
	PolicyEntries string
	// TLS, when set, adds a stomp+ssl connector on 127.0.0.1
	// (Broker.StompSSLAddr). Default: plaintext only.
	TLS *TLSOptions
	// Users, when set, installs the simpleAuthenticationPlugin with these
	// users (name → password, all in group "users"). Anonymous clients
	// stay allowed (the readiness check logs in as none), so only wrong
	// credentials are refused. Default: no authentication.
	Users map[string]string
}

// TLSOptions configure the stomp+ssl connector: Java key and trust
// stores (PKCS#12 files, see tlstest.PKI.PKCS12 and TrustStore).
type TLSOptions struct {
	// KeyStore holds the broker's certificate and key; TrustStore the CAs
	// whose client certificates it accepts. Required, with their
	// passwords.
	KeyStore, KeyStorePassword     string
	TrustStore, TrustStorePassword string
	// NeedClientAuth makes the connector require a client certificate
	// signed by a trusted CA (needClientAuth=true). Default false.
	NeedClientAuth bool
}

// Broker is one running ActiveMQ broker owned by the test process.
type Broker struct {
	// StompAddr is the STOMP connector's "127.0.0.1:port".
	StompAddr string
	// StompSSLAddr is the stomp+ssl connector's "127.0.0.1:port", when
	// Options.TLS was given.
	StompSSLAddr string

	dir     string
	home    string
	java    string
	timeout time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	waitEr error
	stop   sync.Once
	stopEr error
}

// Home returns the ActiveMQ installation directory, or ErrNotInstalled.
func Home() (home, java string, err error) {
	var candidates []string
	if d := os.Getenv("ACTIVEMQ_HOME"); d != "" {
		candidates = append(candidates, d)
	}
	candidates = append(candidates, "/usr/share/activemq")
	for _, d := range candidates {
		if st, err := os.Stat(filepath.Join(d, "bin", "activemq.jar")); err == nil && !st.IsDir() {
			home = d
			break
		}
	}
	if home == "" {
		return "", "", ErrNotInstalled
	}
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		if p := filepath.Join(jh, "bin", "java"); isExec(p) {
			return home, p, nil
		}
	}
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("%w: java not found: %v", ErrNotInstalled, err)
	}
	return home, java, nil
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start launches a broker and waits until it answers a STOMP CONNECT, ctx
// is done or Options.StartTimeout passed. On failure it stops what it
// started and returns the tail of the broker's log in the error.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	home, java, err := Home()
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		// As for RabbitMQ (rabbittest): a JVM broker that boots in
		// seconds on an idle machine can take minutes beside a CPU hog
		// and parallel builds.
		opts.StartTimeout = 4 * time.Minute
	}
	dir, err := os.MkdirTemp(opts.Dir, "activemqtest-")
	if err != nil {
		return nil, err
	}
	port, err := freeport.One()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Broker{StompAddr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, home: home, java: java, timeout: opts.StartTimeout}
	var sslContext, sslConnector string
	if opts.TLS != nil {
		sslPort, err := freeport.One()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		b.StompSSLAddr = "127.0.0.1:" + strconv.Itoa(sslPort)
		sslContext, sslConnector = sslXML(sslPort, opts.TLS)
	}
	if err := b.writeFiles(port, opts.PolicyEntries, usersXML(opts.Users), sslContext, sslConnector); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := b.launchAndWait(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// sslXML returns the broker's sslContext element and the stomp+ssl
// connector's element.
func sslXML(port int, t *TLSOptions) (context, connector string) {
	esc := func(s string) string {
		var b strings.Builder
		_ = xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	context = fmt.Sprintf(`<sslContext><sslContext keyStore="file:%s" keyStorePassword="%s" keyStoreType="PKCS12"
      trustStore="file:%s" trustStorePassword="%s" trustStoreType="PKCS12"/></sslContext>`,
		esc(t.KeyStore), esc(t.KeyStorePassword), esc(t.TrustStore), esc(t.TrustStorePassword))
	connector = fmt.Sprintf(`<transportConnector name="stomp+ssl" uri="stomp+ssl://127.0.0.1:%d?transport.keepAlive=true&amp;transport.needClientAuth=%t"/>`,
		port, t.NeedClientAuth)
	return context, connector
}

// usersXML is the simpleAuthenticationPlugin with users.
func usersXML(users map[string]string) string {
	if len(users) == 0 {
		return ""
	}
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(`<plugins><simpleAuthenticationPlugin anonymousAccessAllowed="true"><users>`)
	for _, u := range names {
		b.WriteString(`<authenticationUser username="`)
		_ = xml.EscapeText(&b, []byte(u))
		b.WriteString(`" password="`)
		_ = xml.EscapeText(&b, []byte(users[u]))
		b.WriteString(`" groups="users"/>`)
	}
	b.WriteString(`</users></simpleAuthenticationPlugin></plugins>`)
	return b.String()
}

func (b *Broker) writeFiles(port int, policies, plugins, sslContext, sslConnector string) error {
	for _, d := range []string{"conf", "data", "tmp"} {
		if err := os.MkdirAll(filepath.Join(b.dir, d), 0o700); err != nil {
			return err
		}
	}
	data := filepath.Join(b.dir, "data")
	xml := fmt.Sprintf(`<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="sluice-test" useJmx="false"
          persistent="true" schedulerSupport="true" advisorySupport="false" dataDirectory="%[1]s">
    <destinationPolicy><policyMap><policyEntries>
      %[3]s
    </policyEntries></policyMap></destinationPolicy>
    <managementContext><managementContext createConnector="false"/></managementContext>
    <persistenceAdapter><kahaDB directory="%[1]s/kahadb"/></persistenceAdapter>
    %[4]s
    %[6]s
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:%[2]d?transport.keepAlive=true"/>
      %[5]s
    </transportConnectors>
  </broker>
</beans>
`, data, port, policies, sslContext, sslConnector, plugins)
	if err := os.WriteFile(filepath.Join(b.dir, "conf", "activemq.xml"), []byte(xml), 0o600); err != nil {
		return err
	}
	log := fmt.Sprintf(`log4j.rootLogger=INFO, logfile
log4j.logger.org.apache.activemq.spring=WARN
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.logfile=org.apache.log4j.FileAppender
log4j.appender.logfile.file=%s/activemq.log
log4j.appender.logfile.append=true
log4j.appender.logfile.layout=org.apache.log4j.PatternLayout
log4j.appender.logfile.layout.ConversionPattern=%%d | %%-5p | %%m | %%c | %%t%%n
`, data)
	return os.WriteFile(filepath.Join(b.dir, "conf", "log4j.properties"), []byte(log), 0o600)
}

// launchAndWait starts the JVM and waits for the STOMP handshake.
func (b *Broker) launchAndWait(ctx context.Context) error {
	if err := b.launch(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if err := b.waitStomp(wctx); err != nil {
		return fmt.Errorf("activemqtest: broker did not start at %s: %w\n--- log tail ---\n%s", b.StompAddr, err, b.LogTail(4096))
	}
	if b.StompSSLAddr != "" {
		// The connectors start one after the other: the stomp+ssl one
		// may still be coming up when the plaintext one answers.
		if err := b.waitListening(wctx, b.StompSSLAddr); err != nil {
			return fmt.Errorf("activemqtest: the stomp+ssl connector did not listen at %s: %w\n--- log tail ---\n%s", b.StompSSLAddr, err, b.LogTail(4096))
		}
	}
	return nil
}

// waitListening polls until addr accepts a TCP connection, the JVM exits
// or ctx is done.
func (b *Broker) waitListening(ctx context.Context, addr string) error {
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		select {
		case <-exited:
			return fmt.Errorf("the JVM exited (last attempt: %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// launch starts the JVM as a child that is killed if the test process
// dies.
func (b *Broker) launch() error {
	out, err := os.OpenFile(filepath.Join(b.dir, "jvm.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	conf := filepath.Join(b.dir, "conf")
	cmd := exec.Command(b.java, "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dactivemq.home="+b.home, "-Dactivemq.base="+b.dir, "-Dactivemq.conf="+conf,
		"-Dactivemq.data="+filepath.Join(b.dir, "data"), "-Djava.io.tmpdir="+filepath.Join(b.dir, "tmp"),
		"-Dactivemq.classpath="+conf, "-Dlog4j.configuration=file:"+filepath.Join(conf, "log4j.properties"),
		"-jar", filepath.Join(b.home, "bin", "activemq.jar"),
		"start", "xbean:file:"+filepath.Join(conf, "activemq.xml"))
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("activemqtest: start java: %w", err)
	}
	exited := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		out.Close()
		b.mu.Lock()
		b.waitEr = err
		b.mu.Unlock()
		close(exited)
	}()
	return nil
}

// waitStomp polls a STOMP handshake until it succeeds, the JVM exits or
// ctx is done.
func (b *Broker) waitStomp(ctx context.Context) error {
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := b.ping(); err == nil {
			return nil
		}
		select {
		case <-exited:
			b.mu.Lock()
			err := b.waitEr
			b.mu.Unlock()
			return fmt.Errorf("the JVM exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ping completes one STOMP handshake and disconnects.
func (b *Broker) ping() error {
	nc, err := net.DialTimeout("tcp", b.StompAddr, 2*time.Second)
	if err != nil {
		return err
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	c, err := stomp.Connect(nc, stomp.ConnOpt.Host("localhost"))
	if err != nil {
		nc.Close()
		return err
	}
	_ = c.MustDisconnect()
	return nil
}

// PID returns the JVM's process id (0 when not running).
func (b *Broker) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return testbroker.PID(b.cmd)
}

// Restart stops the JVM (SIGTERM: ActiveMQ's shutdown hook stops the
// broker and closes its store; SIGKILL after 30s) and starts it again on
// the same port and data directory, returning once it answers STOMP.
// Every client connection is closed; persistent messages, scheduled
// messages and queues are kept.
func (b *Broker) Restart(ctx context.Context) error {
	if err := b.kill(30 * time.Second); err != nil {
		return err
	}
	return b.launchAndWait(ctx)
}

func (b *Broker) kill(grace time.Duration) error {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return testbroker.Terminate(cmd.Process, exited, grace)
}

// LogTail returns up to max bytes from the end of the broker's logs.
func (b *Broker) LogTail(max int) string {
	var sb strings.Builder
	for _, f := range []string{filepath.Join(b.dir, "data", "activemq.log"), filepath.Join(b.dir, "jvm.out")} {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&sb, "== %s\n%s\n", filepath.Base(f), data)
	}
	return sb.String()
}

// Stop stops the JVM by PID (SIGTERM, SIGKILL after 30s) and removes the
// broker's directory. It is idempotent.
func (b *Broker) Stop() error {
	b.stop.Do(func() {
		b.stopEr = b.kill(30 * time.Second)
		if err := os.RemoveAll(b.dir); err != nil && b.stopEr == nil {
			b.stopEr = err
		}
	})
	return b.stopEr
}
