// Package embedded runs an in-process MQTT 5 broker on a loopback port,
// for development and tests. It is sluice's own, small broker on
// paho.golang's packet codec.
//
// # Development only
//
// The embedded broker keeps sessions, subscriptions and queued messages in
// memory: everything is lost when the process exits, a session's queue is
// unbounded (a subscriber that never reads grows it), and every client is
// allowed to connect without credentials (unless Options.Users names the
// accepted ones; Options.TLS makes the listener a TLS listener). It is
// meant for a laptop, an example or a test — production deployments use a
// real broker such as mosquitto. The sluice MQTT adapter behaves the same
// against both, except where docs/adapters/mqtt.md says otherwise.
//
// # What it implements
//
// MQTT 5 only (a 3.1 or 3.1.1 CONNECT is refused with return code 0x01);
// QoS 0 and 1 (Maximum QoS 1: a QoS 2 PUBLISH is answered with DISCONNECT
// 0x9B); no retained messages (Retain Available 0: DISCONNECT 0x9A), no
// topic aliases, no subscription identifiers, no enhanced authentication.
// Sessions with their expiry interval (exact: a timer per disconnected
// session), resumed with their unacknowledged messages sent again in
// order (DUP, same packet ids) before the queued ones; a second connection
// with a client id takes the session over (the first gets DISCONNECT
// 0x8E). Receive Maximum both ways (a client exceeding the broker's gets
// DISCONNECT 0x93). Message expiry (an expired message is never sent; a
// forwarded one carries what is left of its interval). Will messages, with
// their delay. Wildcard and shared subscriptions: a shared subscription
// gives each message to one member, round-robin among the connected
// members with room under their Receive Maximum (else among the connected
// ones, else among all, to wait in that member's session); a member whose
// session ends, or that unsubscribes, hands what it holds of the group —
// queued and unacknowledged — to the remaining members. A QoS 1 PUBLISH is
// routed (queued in every matching session) before its PUBACK is written:
// reason 0x00, 0x10 when no subscription matched, 0x87 when
// Options.AllowPublish refuses it. QoS 0 messages are not kept for a
// disconnected session.
//
// # Use
//
//	b, err := embedded.Start(embedded.Options{})
//	...
//	defer b.Close()
//	a, err := mqtt.New(ctx, mqtt.Options{URL: b.URL()})
package embedded

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// Options configure the embedded broker. The zero value is usable.
type Options struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:0" (a free
	// loopback port; read it back with Broker.Addr).
	Addr string
	// Logger receives the broker's own log. Default: discarded.
	Logger *slog.Logger
	// ReceiveMaximum is the broker's receive maximum per client (how many
	// unacknowledged QoS 1 publishes a client may send it; one more ends
	// the connection with DISCONNECT 0x93). Default 1024.
	ReceiveMaximum uint16
	// AllowPublish, when set, decides whether a client may publish to a
	// topic; a refused QoS 1 publish is answered with PUBACK reason code
	// 0x87 (not authorized), a refused QoS 0 one dropped, a refused will
	// refuses the CONNECT (0x87). Default: every publish is allowed.
	AllowPublish func(clientID, topic string) bool
	// AllowSubscribe, when set, decides whether a client may subscribe to
	// a filter (as the client wrote it, "$share/<name>/" included); a
	// refused filter is answered with SUBACK reason code 0x87 (not
	// authorized). Default: every subscription is allowed.
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

// Broker is a running embedded broker.
type Broker struct {
	opts       Options
	log        *slog.Logger
	receiveMax int
	ln         net.Listener
	addr       string
	scheme     string // mqtt:// or mqtts://

	acceptDone chan struct{}
	wg         sync.WaitGroup // every connection's goroutines

	mu           sync.Mutex // guards everything below, and every session
	closed       bool
	conns        map[*conn]struct{}
	sessions     map[string]*session
	root         *node
	autoID       uint64
	plainScratch map[*session]byte // routeLocked's
	groupScratch []*group

	// now is the clock of message expiry (a test's own in tests).
	now func() time.Time
	// testSessionEnded, when set (tests), is called under mu when a
	// session ends.
	testSessionEnded func(clientID string)
	// testWriterRound, when set (tests), is called at the start of every
	// round of a connection's writer, without the lock.
	testWriterRound func(c *conn)

	closeOnce sync.Once
	closeErr  error
}

// Start starts a broker on opts.Addr and returns once it is listening.
func Start(opts Options) (*Broker, error) {
	addr := cmp.Or(opts.Addr, "127.0.0.1:0")
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embedded: listen %s: %w", addr, err)
	}
	b := &Broker{opts: opts, log: logger, receiveMax: int(cmp.Or(opts.ReceiveMaximum, 1024)), addr: ln.Addr().String(), scheme: "mqtt://",
		acceptDone: make(chan struct{}), conns: map[*conn]struct{}{}, sessions: map[string]*session{}, root: newNode(nil, ""),
		plainScratch: map[*session]byte{}, now: time.Now}
	if opts.TLS != nil {
		ln, b.scheme = tls.NewListener(ln, opts.TLS), "mqtts://"
	}
	b.ln = ln
	go b.serve()
	return b, nil
}

// Addr is the host:port the broker listens on.
func (b *Broker) Addr() string { return b.addr }

// URL is the broker's address as an mqtt:// URL (mqtts:// with
// Options.TLS) for mqtt.Options.URL.
func (b *Broker) URL() string { return b.scheme + b.addr }

// closeTimeout bounds Close's wait for the connections' goroutines.
var closeTimeout = 10 * time.Second

// Close stops accepting, sends every client DISCONNECT 0x8B (server
// shutting down), closes every connection and waits for every goroutine
// of the broker, at most about twice closeTimeout (10 s): past the first,
// it closes the remaining sockets outright; past the second, it returns an
// error naming what is left. Sessions and queued messages are dropped. It
// is idempotent.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.shutdown() })
	return b.closeErr
}

func (b *Broker) shutdown() error {
	_ = b.ln.Close()
	<-b.acceptDone
	b.mu.Lock()
	b.closed = true
	for _, s := range b.sessions {
		s.stopTimers()
	}
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
		c.killLocked(codeShuttingDown, "the broker is shutting down", false)
	}
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	for _, c := range conns {
		_ = c.nc.Close()
	}
	timer.Reset(closeTimeout)
	select {
	case <-done:
		return nil
	case <-timer.C:
		b.mu.Lock()
		left := len(b.conns)
		b.mu.Unlock()
		return fmt.Errorf("embedded: %d connection(s) of the broker on %s did not end within %v after Close", left, b.addr, 2*closeTimeout)
	}
}

// serve accepts connections until the listener is closed.
func (b *Broker) serve() {
	defer close(b.acceptDone)
	for delay := time.Duration(0); ; {
		nc, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			b.log.Warn("embedded: accept", "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := newConn(b, nc)
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = nc.Close()
			continue
		}
		b.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go c.run()
	}
}

func (b *Broker) forget(c *conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

func (b *Broker) logEnd(c *conn, err error) {
	var pe *protocolError
	switch {
	case errors.As(err, &pe) && pe.code != codeKeepAliveTimeout:
		b.log.Warn("embedded: connection closed", "client", c.id, "remote", c.remote, "error", err)
	default:
		b.log.Debug("embedded: connection closed", "client", c.id, "remote", c.remote, "reason", err)
	}
}

// newClientID assigns a client id to a client that sent none.
func (b *Broker) newClientID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		b.autoID++
		id := "sluice-embedded-" + strconv.FormatUint(b.autoID, 10)
		if b.sessions[id] == nil {
			return id
		}
	}
}

// attach gives c its session after an accepted CONNECT — resumed, or new
// with cleanStart or when none is kept — taking it over from the
// connection that has it, queues the CONNACK and starts the writer.
func (b *Broker) attach(c *conn, cleanStart, assigned bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || c.ending {
		return errEnded
	}
	s := b.sessions[c.id]
	if s != nil && s.conn != nil {
		s.conn.killLocked(codeSessionTakenOver, "another connection with the same client identifier took the session over", true)
	}
	if s != nil && cleanStart {
		b.endSessionLocked(s)
		s = nil
	}
	present := s != nil
	if s == nil {
		s = newSession(c.id)
		b.sessions[c.id] = s
	}
	s.stopTimers()
	s.will = nil // a new connection before the will's delay: not sent
	s.expiry = c.connectExpiry
	c.session = s
	s.attached(c)
	one, zero := maxQoS, byte(0)
	rm, noAliases := uint16(b.receiveMax), uint16(0)
	ca := &packets.Connack{SessionPresent: present, Properties: &packets.Properties{ReceiveMaximum: &rm, MaximumQOS: &one,
		RetainAvailable: &zero, TopicAliasMaximum: &noAliases, WildcardSubAvailable: &one, SubIDAvailable: &zero, SharedSubAvailable: &one}}
	if assigned {
		ca.Properties.AssignedClientID = c.id
	}
	c.ctl = append(c.ctl, ca)
	c.started = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		c.writeLoop()
	}()
	c.wakeLocked()
	b.log.Debug("embedded: client connected", "client", c.id, "remote", c.remote, "session_present", present)
	return nil
}

// detachLocked ends c's hold on its session: withWill publishes its will
// (or arms its delay); unless keep, the session's expiry starts.
func (b *Broker) detachLocked(c *conn, withWill, keep bool) {
	s := c.session
	if s == nil || s.conn != c {
		return
	}
	s.detached()
	w := c.will
	c.will = nil
	if b.closed {
		return
	}
	if withWill && w != nil {
		b.willLocked(s, w)
	}
	if !keep {
		b.expireLaterLocked(s)
	}
}

// publish routes p, a PUBLISH of c (unless AllowPublish refused it), and
// queues its PUBACK.
func (b *Broker) publish(c *conn, p *packets.Publish, allowed bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.ending {
		return errEnded
	}
	if p.QoS > 0 && c.pendingAcks >= b.receiveMax {
		return protoErr(codeReceiveMaxExceeded, "more than Receive Maximum (%d) QoS 1 PUBLISHes unacknowledged", b.receiveMax)
	}
	code, props := byte(codeNotAuthorized), c.reason("not authorized to publish to %q", p.Topic)
	if allowed {
		code, props = codeSuccess, &packets.Properties{}
		if b.routeLocked(newMessage(p, b.now()), c.session) == 0 {
			code = codeNoSubscribers
		}
	}
	if p.QoS > 0 {
		c.pendingAcks++
		c.queueLocked(&packets.Puback{PacketID: p.PacketID, ReasonCode: code, Properties: props})
	}
	return nil
}

// acked handles the client's PUBACK of packet id.
func (b *Broker) acked(c *conn, id uint16) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := c.session
	if c.ending || s == nil || s.conn != c {
		return
	}
	d := s.byID[id]
	if d == nil {
		return // not in flight (any more): nothing to do
	}
	if d.sent {
		s.outstanding--
	}
	s.removeInflight(d)
	c.wakeLocked()
}

// subscribe applies the filters of p granted in codes, then queues the
// SUBACK.
func (b *Broker) subscribe(c *conn, p *packets.Subscribe, codes []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.ending {
		return errEnded
	}
	for i, so := range p.Subscriptions {
		if codes[i] <= maxQoS {
			b.subscribeLocked(c.session, so)
		}
	}
	c.queueLocked(&packets.Suback{PacketID: p.PacketID, Reasons: codes, Properties: &packets.Properties{}})
	return nil
}

// unsubscribe removes the filters of p and queues the UNSUBACK.
func (b *Broker) unsubscribe(c *conn, p *packets.Unsubscribe) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.ending {
		return errEnded
	}
	codes := make([]byte, len(p.Topics))
	for i, f := range p.Topics {
		switch {
		case !validFilter(f):
			codes[i] = codeFilterInvalid
		case !b.unsubscribeLocked(c.session, f):
			codes[i] = codeNoSubscription
		}
	}
	c.queueLocked(&packets.Unsuback{PacketID: p.PacketID, Reasons: codes, Properties: &packets.Properties{}})
	return nil
}

// send queues control packet p on c.
func (b *Broker) send(c *conn, p packets.Packet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c.queueLocked(p)
}

// setExpiry sets the session expiry interval of c's session (DISCONNECT).
func (b *Broker) setExpiry(c *conn, e uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := c.session; s != nil && s.conn == c {
		s.expiry = e
	}
}
