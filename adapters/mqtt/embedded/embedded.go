// Package embedded runs an in-process MQTT 5 broker (mochi-mqtt) on a
// loopback port, for development and tests.
//
// # Development only
//
// The embedded broker keeps sessions, subscriptions and queued messages in
// memory: everything is lost when the process exits, and every client is
// allowed to connect without credentials (unless Options.Users names the
// accepted ones; Options.TLS makes the listener a TLS listener). It is meant for a laptop, an
// example or a test — production deployments use a real broker such as
// mosquitto. The sluice MQTT adapter behaves the same against both, except
// where docs/adapters/mqtt.md says otherwise (shared-subscription
// distribution is random rather than round-robin).
//
// # Use
//
//	b, err := embedded.Start(embedded.Options{})
//	...
//	defer b.Close()
//	a, err := mqtt.New(ctx, mqtt.Options{URL: b.URL()})
package embedded

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Options configure the embedded broker. The zero value is usable.
type Options struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:0" (a free
	// loopback port; read it back with Broker.Addr).
	Addr string
	// Logger receives the broker's own log. Default: discarded.
	Logger *slog.Logger
	// ReceiveMaximum is the broker's receive maximum per client (how many
	// unacknowledged QoS 1 publishes a client may send it). Default 1024.
	ReceiveMaximum uint16
	// AllowPublish, when set, decides whether a client may publish to a
	// topic; a refused QoS 1 publish is answered with PUBACK reason code
	// 0x87 (not authorized). Default: every publish is allowed.
	AllowPublish func(clientID, topic string) bool
	// AllowSubscribe, when set, decides whether a client may subscribe to
	// a filter; a refused filter is answered with SUBACK reason code 0x87
	// (not authorized). Default: every subscription is allowed.
	AllowSubscribe func(clientID, filter string) bool
	// TLS, when set, makes the listener a TLS listener with this
	// configuration (its certificate, and ClientCAs/ClientAuth to verify
	// client certificates); URL is then mqtts://. Default: plaintext.
	TLS *tls.Config
	// Users, when set, are the only user names and passwords the broker
	// accepts: a CONNECT with any other is refused with CONNACK reason
	// 0x86 (bad user name or password). Default: every client is accepted.
	Users map[string]string
}

// authHook allows every connection (or those with one of users'
// credentials) and asks AllowPublish about publishes.
type authHook struct {
	mochi.HookBase
	allowPublish   func(clientID, topic string) bool
	allowSubscribe func(clientID, filter string) bool
	users          map[string]string
}

func (h *authHook) ID() string { return "sluice-embedded-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}

func (h *authHook) OnConnectAuthenticate(_ *mochi.Client, pk packets.Packet) bool {
	if h.users == nil {
		return true
	}
	want, ok := h.users[string(pk.Connect.Username)]
	return ok && pk.Connect.PasswordFlag && subtle.ConstantTimeCompare([]byte(want), pk.Connect.Password) == 1
}

func (h *authHook) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	switch {
	case write && h.allowPublish != nil:
		return h.allowPublish(cl.ID, topic)
	case !write && h.allowSubscribe != nil:
		return h.allowSubscribe(cl.ID, topic)
	}
	return true
}

// Broker is a running embedded broker.
type Broker struct {
	srv    *mochi.Server
	ln     net.Listener
	tl     *trackedListener
	addr   string
	scheme string // mqtt:// or mqtts://

	// serverClose is srv.Close; a test replaces it to prove Close is
	// bounded.
	serverClose func() error
	// startGoroutine is the highest goroutine id when the broker started
	// (InflightDeadlock counts only goroutines started after it).
	startGoroutine int64

	closeOnce sync.Once
	closeErr  error
}

// Start starts a broker that accepts every connection on opts.Addr (mochi
// refuses all connections without an auth hook; this one allows them) and
// returns once it is listening.
func Start(opts Options) (*Broker, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	caps := mochi.NewDefaultServerCapabilities()
	if opts.ReceiveMaximum > 0 {
		caps.ReceiveMaximum = opts.ReceiveMaximum
	}
	srv := mochi.New(&mochi.Options{Logger: logger, Capabilities: caps})
	if err := srv.AddHook(&authHook{allowPublish: opts.AllowPublish, allowSubscribe: opts.AllowSubscribe, users: opts.Users}, nil); err != nil {
		return nil, fmt.Errorf("embedded: auth hook: %w", err)
	}
	start := lastGoroutine()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embedded: listen %s: %w", addr, err)
	}
	scheme := "mqtt://"
	if opts.TLS != nil {
		ln, scheme = tls.NewListener(ln, opts.TLS), "mqtts://"
	}
	tl := &trackedListener{id: "sluice-embedded", ln: ln, served: make(chan struct{})}
	if err := srv.AddListener(tl); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("embedded: add listener: %w", err)
	}
	if err := srv.Serve(); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("embedded: serve: %w", err)
	}
	return &Broker{srv: srv, ln: ln, tl: tl, addr: ln.Addr().String(), scheme: scheme, serverClose: srv.Close, startGoroutine: start}, nil
}

// Addr is the host:port the broker listens on.
func (b *Broker) Addr() string { return b.addr }

// URL is the broker's address as an mqtt:// URL (mqtts:// with
// Options.TLS) for mqtt.Options.URL.
func (b *Broker) URL() string { return b.scheme + b.addr }

// closeTimeout bounds Close: mochi's Server.Close waits for its client
// goroutines and has been seen to hang.
var closeTimeout = 10 * time.Second

// Close disconnects every client and stops the broker, waiting at most
// 10 seconds: past it, Close closes the listener itself, leaves mochi's
// remaining goroutines behind and returns an error saying so. It is
// idempotent.
//
// Close drains before it calls mochi's Server.Close: it stops accepting,
// disconnects every client and waits until each connection's goroutine
// has returned, so that no client is added or removed while Server.Close
// runs. mochi v2.7.9's own client shutdown (closeListenerClients) takes
// the clients' read lock twice, and a client removed in between
// deadlocks it (docs/reliability.md, known defects); the listener here never
// calls it.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		done := make(chan error, 1)
		go func() { done <- b.shutdown() }()
		timer := time.NewTimer(closeTimeout)
		defer timer.Stop()
		select {
		case err := <-done:
			b.closeErr = err
		case <-timer.C:
			_ = b.ln.Close() // no new connections, whatever mochi is stuck on
			b.closeErr = fmt.Errorf("embedded: the mochi broker on %s did not stop within %v; its remaining goroutines are abandoned", b.addr, closeTimeout)
		}
		if errors.Is(b.closeErr, net.ErrClosed) {
			b.closeErr = nil
		}
	})
	return b.closeErr
}

func (b *Broker) shutdown() error {
	_ = b.ln.Close()
	<-b.tl.served // no connection is accepted any more
	for _, cl := range b.srv.Clients.GetAll() {
		if !cl.Closed() {
			_ = b.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
	b.tl.conns.Wait() // every connection's goroutine returned
	return b.serverClose()
}

// trackedListener is mochi's TCP listener with the goroutine of each
// connection counted, so that Close can wait for them, and a Close that
// leaves the clients to Broker.Close.
type trackedListener struct {
	id     string
	ln     net.Listener
	log    *slog.Logger
	served chan struct{} // closed when Serve returned
	conns  sync.WaitGroup
}

var _ listeners.Listener = (*trackedListener)(nil)

func (l *trackedListener) Init(log *slog.Logger) error { l.log = log; return nil }
func (l *trackedListener) ID() string                  { return l.id }
func (l *trackedListener) Address() string             { return l.ln.Addr().String() }
func (l *trackedListener) Protocol() string            { return l.ln.Addr().Network() }

// Serve accepts connections until the listener is closed; each is served
// on a goroutine of its own that conns counts.
func (l *trackedListener) Serve(establish listeners.EstablishFn) {
	defer close(l.served)
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.conns.Add(1)
		go func() {
			defer l.conns.Done()
			if err := establish(l.id, conn); err != nil && l.log != nil {
				l.log.Warn("embedded: connection ended", "error", err)
			}
		}()
	}
}

// Close closes the network listener only: Broker.Close disconnected the
// clients before Server.Close calls it.
func (l *trackedListener) Close(listeners.CloseFn) { _ = l.ln.Close() }
