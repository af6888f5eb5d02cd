package embedded

import (
	"bufio"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/packets"
)

// Reason codes the broker sends (MQTT 5, 2.4).
const (
	codeSuccess                 = 0x00
	codeNoSubscribers           = 0x10
	codeNoSubscription          = 0x11
	codeUnsupportedVersion      = 0x01 // an MQTT 3.1.1 CONNACK's return code
	codeMalformed               = 0x81
	codeProtocolError           = 0x82
	codeClientIDInvalid         = 0x85
	codeBadCredentials          = 0x86
	codeNotAuthorized           = 0x87
	codeBadAuthMethod           = 0x8C
	codeShuttingDown            = 0x8B
	codeKeepAliveTimeout        = 0x8D
	codeSessionTakenOver        = 0x8E
	codeFilterInvalid           = 0x8F
	codeTopicInvalid            = 0x90
	codeReceiveMaxExceeded      = 0x93
	codeTopicAliasInvalid       = 0x94
	codeRetainUnsupported       = 0x9A
	codeQoSUnsupported          = 0x9B
	codeSubIDsNotSupported      = 0xA1
	maxQoS                 byte = 1
)

// Timing bounds; variables for tests.
var (
	// connectTimeout bounds the wait for a new connection's CONNECT.
	connectTimeout = 10 * time.Second
	// writeGrace bounds a connection's last writes (its DISCONNECT) once
	// it ends.
	writeGrace = 2 * time.Second
	// linger bounds how long a closing connection waits for the client to
	// close its side, so that nothing it sent resets the socket before it
	// read the broker's last packet.
	linger = 2 * time.Second
)

// conn is one network connection: a reader (its own goroutine, run) and,
// once the CONNECT was accepted, a writer (writeLoop) that drains what the
// broker queued for it.
type conn struct {
	b      *Broker
	nc     net.Conn
	br     *bufio.Reader
	reads  *recordingReader
	remote string

	// Set by the handshake, read-only after.
	id            string
	keepAlive     time.Duration
	receiveMax    int  // the client's Receive Maximum
	maxPacket     int  // the client's Maximum Packet Size; 0: none
	problemInfo   bool // the client takes reason strings
	connectExpiry uint32

	wake       chan struct{} // capacity 1: the writer has something to do
	writerDone chan struct{}

	// Guarded by Broker.mu.
	session     *session
	started     bool             // the writer runs
	ending      bool             // the connection is ending: nothing more is sent but final
	final       packets.Packet   // the last packet (a DISCONNECT), or nil
	ctl         []packets.Packet // control packets to send, in order
	pendingAcks int              // PUBACKs queued, not yet taken by the writer
	will        *will

	dl        sync.Mutex // orders read-deadline changes
	lingering bool
}

// recordingReader remembers the error of the network read, so that a
// malformed packet is told from a failed read.
type recordingReader struct {
	r   io.Reader
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		r.err = err
	}
	return n, err
}

// protocolError ends a connection with a DISCONNECT (or, before CONNACK,
// just the close).
type protocolError struct {
	code   byte
	reason string
}

func (e *protocolError) Error() string {
	return fmt.Sprintf("reason code 0x%02X: %s", e.code, e.reason)
}

func protoErr(code byte, format string, args ...any) error {
	return &protocolError{code: code, reason: fmt.Sprintf(format, args...)}
}

// clientDisconnect is the client's DISCONNECT.
type clientDisconnect struct{ will bool }

func (clientDisconnect) Error() string { return "the client disconnected" }

var (
	errEnded   = errors.New("the connection was ended by the broker")
	errRefused = errors.New("CONNECT refused")
)

func newConn(b *Broker, nc net.Conn) *conn {
	c := &conn{b: b, nc: nc, remote: nc.RemoteAddr().String(), wake: make(chan struct{}, 1), writerDone: make(chan struct{})}
	c.reads = &recordingReader{r: nc}
	c.br = bufio.NewReaderSize(c.reads, 16<<10)
	return c
}

// run serves the connection until it ends, then closes it.
func (c *conn) run() {
	defer c.b.wg.Done()
	defer c.b.forget(c)
	err := c.handshake()
	if err == nil {
		err = c.readLoop()
	}
	readable := c.reads.err == nil
	c.b.mu.Lock()
	c.endLocked(err)
	started := c.started
	c.b.mu.Unlock()
	if started {
		if readable {
			// Until the writer's last packet is read and the client
			// closes (or linger): unread input would reset the socket.
			_, _ = io.Copy(io.Discard, c.br)
		}
		<-c.writerDone
	}
	_ = c.nc.Close()
	c.b.logEnd(c, err)
}

// handshake reads the CONNECT (within connectTimeout) and attaches the
// session, or refuses the connection.
func (c *conn) handshake() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(connectTimeout))
	version, err := c.protocolVersion()
	if err != nil {
		return err
	}
	if version != 5 {
		// An MQTT 3.1 or 3.1.1 CONNACK: unacceptable protocol version.
		return c.refuse([]byte{packets.CONNACK << 4, 2, 0, codeUnsupportedVersion}, "MQTT protocol level %d; the embedded broker speaks MQTT 5 only", version)
	}
	pk, err := packets.ReadPacket(c.br)
	if err != nil {
		return err
	}
	cp, ok := pk.Content.(*packets.Connect)
	if !ok {
		return fmt.Errorf("first packet is %s, not CONNECT", pk.PacketType())
	}
	c.id = cp.ClientID
	if code, why := c.check(cp); code != codeSuccess {
		return c.refuseConnack(code, "%s", why)
	}
	props := cp.Properties
	c.keepAlive = time.Duration(cp.KeepAlive) * time.Second
	c.receiveMax, c.problemInfo = 65535, true
	if props.ReceiveMaximum != nil {
		c.receiveMax = int(*props.ReceiveMaximum)
	}
	if props.MaximumPacketSize != nil {
		c.maxPacket = int(*props.MaximumPacketSize)
	}
	if props.RequestProblemInfo != nil {
		c.problemInfo = *props.RequestProblemInfo != 0
	}
	if props.SessionExpiryInterval != nil {
		c.connectExpiry = *props.SessionExpiryInterval
	}
	if cp.WillFlag {
		w := &will{p: &packets.Publish{Topic: cp.WillTopic, Payload: cp.WillMessage, QoS: cp.WillQOS, Properties: cp.WillProperties}}
		if w.p.Properties == nil {
			w.p.Properties = &packets.Properties{}
		}
		if d := w.p.Properties.WillDelayInterval; d != nil {
			w.delay = time.Duration(*d) * time.Second
			w.p.Properties.WillDelayInterval = nil
		}
		c.will = w
	}
	if c.id == "" {
		c.id = c.b.newClientID()
	}
	if c.b.opts.AllowPublish != nil && cp.WillFlag && !c.b.opts.AllowPublish(c.id, cp.WillTopic) {
		return c.refuseConnack(codeNotAuthorized, "not authorized to publish the will message to %q", cp.WillTopic)
	}
	c.dl.Lock()
	_ = c.nc.SetReadDeadline(time.Time{})
	c.dl.Unlock()
	if err := c.b.attach(c, cp.CleanStart, cp.ClientID == ""); err != nil {
		return err
	}
	return nil
}

// protocolVersion peeks at the first packet: a CONNECT's protocol level,
// 3 for MQTT 3.1's "MQIsdp".
func (c *conn) protocolVersion() (byte, error) {
	head, err := c.br.Peek(2)
	if err != nil {
		return 0, err
	}
	if head[0] != packets.CONNECT<<4 {
		return 0, fmt.Errorf("first packet type %d, not CONNECT", head[0]>>4)
	}
	n := 0 // fixed header length
	for i := 1; n == 0; i++ {
		if i > 4 {
			return 0, errors.New("malformed remaining length")
		}
		p, err := c.br.Peek(i + 1)
		if err != nil {
			return 0, err
		}
		if p[i]&0x80 == 0 {
			n = i + 1
		}
	}
	p, err := c.br.Peek(n + 2)
	if err != nil {
		return 0, err
	}
	nameLen := int(p[n])<<8 | int(p[n+1])
	if nameLen != 4 && nameLen != 6 {
		return 0, errors.New("not an MQTT CONNECT (protocol name)")
	}
	if p, err = c.br.Peek(n + 2 + nameLen + 1); err != nil {
		return 0, err
	}
	switch string(p[n+2 : n+2+nameLen]) {
	case "MQTT":
		return p[n+2+nameLen], nil
	case "MQIsdp":
		return 3, nil
	}
	return 0, errors.New("not an MQTT CONNECT (protocol name)")
}

// check validates cp: codeSuccess, or the CONNACK reason code refusing it.
func (c *conn) check(cp *packets.Connect) (byte, string) {
	props := cp.Properties
	switch {
	case !utf8.ValidString(cp.ClientID):
		return codeClientIDInvalid, "the client identifier is not valid UTF-8"
	case props.AuthMethod != "":
		return codeBadAuthMethod, "enhanced authentication is not supported"
	case props.ReceiveMaximum != nil && *props.ReceiveMaximum == 0:
		return codeProtocolError, "Receive Maximum 0"
	case props.MaximumPacketSize != nil && *props.MaximumPacketSize == 0:
		return codeProtocolError, "Maximum Packet Size 0"
	case cp.WillFlag && cp.WillQOS > maxQoS:
		return codeQoSUnsupported, "will QoS above the Maximum QoS 1"
	case cp.WillFlag && cp.WillRetain:
		return codeRetainUnsupported, "retained messages are not supported"
	case cp.WillFlag && !validTopic(cp.WillTopic):
		return codeTopicInvalid, "invalid will topic"
	}
	if users := c.b.opts.Users; users != nil {
		want, ok := users[cp.Username]
		if !ok || !cp.UsernameFlag || !cp.PasswordFlag || subtle.ConstantTimeCompare([]byte(want), cp.Password) != 1 {
			return codeBadCredentials, "bad user name or password"
		}
	}
	return codeSuccess, ""
}

// refuseConnack answers CONNECT with an MQTT 5 CONNACK refusing it.
func (c *conn) refuseConnack(code byte, format string, args ...any) error {
	ca := &packets.Connack{ReasonCode: code, Properties: &packets.Properties{ReasonString: fmt.Sprintf(format, args...)}}
	var buf packetBuffer
	_, _ = ca.WriteTo(&buf)
	return c.refuse(buf, format, args...)
}

// refuse writes raw (a refusing CONNACK) and closes the connection
// gracefully.
func (c *conn) refuse(raw []byte, format string, args ...any) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeGrace))
	if _, err := c.nc.Write(raw); err == nil {
		c.closeWrite()
		_, _ = io.Copy(io.Discard, c.br)
	}
	return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
}

type packetBuffer []byte

func (b *packetBuffer) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// closeWrite half-closes the connection and bounds the reads that follow
// by linger.
func (c *conn) closeWrite() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	c.dl.Lock()
	c.lingering = true
	_ = c.nc.SetReadDeadline(time.Now().Add(linger))
	c.dl.Unlock()
}

// readLoop handles the client's packets until the connection ends.
func (c *conn) readLoop() error {
	for {
		if c.keepAlive > 0 {
			c.dl.Lock()
			if !c.lingering {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.keepAlive * 3 / 2))
			}
			c.dl.Unlock()
		}
		pk, err := packets.ReadPacket(c.br)
		if err != nil {
			var ne net.Error
			switch {
			case c.reads.err == nil:
				return protoErr(codeMalformed, "malformed packet: %v", err)
			case errors.As(err, &ne) && ne.Timeout() && !c.isEnding():
				return protoErr(codeKeepAliveTimeout, "nothing received for 1.5 times the keep-alive (%v)", c.keepAlive)
			}
			return err
		}
		if c.isEnding() {
			return errEnded
		}
		if err := c.handle(pk); err != nil {
			return err
		}
	}
}

func (c *conn) isEnding() bool {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.ending
}

func (c *conn) handle(pk *packets.ControlPacket) error {
	switch p := pk.Content.(type) {
	case *packets.Publish:
		return c.onPublish(p)
	case *packets.Puback:
		c.b.acked(c, p.PacketID)
	case *packets.Subscribe:
		return c.onSubscribe(p)
	case *packets.Unsubscribe:
		return c.onUnsubscribe(p)
	case *packets.Pingreq:
		c.b.send(c, &packets.Pingresp{})
	case *packets.Disconnect:
		return c.onDisconnect(p)
	case *packets.Auth:
		return protoErr(codeProtocolError, "AUTH without enhanced authentication")
	default:
		return protoErr(codeProtocolError, "unexpected %s from a client", pk.PacketType())
	}
	return nil
}

func (c *conn) onPublish(p *packets.Publish) error {
	props := p.Properties
	switch {
	case p.QoS > 2:
		return protoErr(codeMalformed, "PUBLISH with QoS 3")
	case p.QoS > maxQoS:
		return protoErr(codeQoSUnsupported, "QoS %d is above the Maximum QoS 1", p.QoS)
	case p.Retain:
		return protoErr(codeRetainUnsupported, "retained messages are not supported")
	case p.QoS > 0 && p.PacketID == 0:
		return protoErr(codeProtocolError, "QoS 1 PUBLISH with packet identifier 0")
	case props.TopicAlias != nil:
		return protoErr(codeTopicAliasInvalid, "topic aliases are not supported (Topic Alias Maximum 0)")
	case props.SubscriptionIdentifier != nil:
		return protoErr(codeProtocolError, "PUBLISH from a client with a subscription identifier")
	case !validTopic(p.Topic):
		return protoErr(codeTopicInvalid, "invalid topic name %q", p.Topic)
	}
	allowed := c.b.opts.AllowPublish == nil || c.b.opts.AllowPublish(c.id, p.Topic)
	return c.b.publish(c, p, allowed)
}

func (c *conn) onSubscribe(p *packets.Subscribe) error {
	if p.Properties.SubscriptionIdentifier != nil {
		return protoErr(codeSubIDsNotSupported, "subscription identifiers are not supported")
	}
	if len(p.Subscriptions) == 0 {
		return protoErr(codeProtocolError, "SUBSCRIBE without a topic filter")
	}
	codes := make([]byte, len(p.Subscriptions))
	for i, so := range p.Subscriptions {
		share, _, _ := splitShare(so.Topic)
		switch {
		case so.QoS > 2 || so.RetainHandling > 2:
			return protoErr(codeMalformed, "subscription options of %q", so.Topic)
		case !validFilter(so.Topic):
			codes[i] = codeFilterInvalid
		case share != "" && so.NoLocal:
			return protoErr(codeProtocolError, "No Local on the shared subscription %q", so.Topic)
		case c.b.opts.AllowSubscribe != nil && !c.b.opts.AllowSubscribe(c.id, so.Topic):
			codes[i] = codeNotAuthorized
		default:
			codes[i] = min(so.QoS, maxQoS)
		}
	}
	return c.b.subscribe(c, p, codes)
}

func (c *conn) onUnsubscribe(p *packets.Unsubscribe) error {
	if len(p.Topics) == 0 {
		return protoErr(codeProtocolError, "UNSUBSCRIBE without a topic filter")
	}
	return c.b.unsubscribe(c, p)
}

func (c *conn) onDisconnect(p *packets.Disconnect) error {
	if e := p.Properties.SessionExpiryInterval; e != nil {
		if c.connectExpiry == 0 && *e != 0 {
			return protoErr(codeProtocolError, "DISCONNECT sets a session expiry after CONNECT set none")
		}
		c.b.setExpiry(c, *e)
	}
	return clientDisconnect{will: p.ReasonCode != codeSuccess}
}

// reason is a reason-string property for the client, if it takes them.
func (c *conn) reason(format string, args ...any) *packets.Properties {
	if !c.problemInfo {
		return &packets.Properties{}
	}
	return &packets.Properties{ReasonString: fmt.Sprintf(format, args...)}
}

// wakeLocked tells the writer there is something to do.
func (c *conn) wakeLocked() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// queueLocked queues a control packet.
func (c *conn) queueLocked(p packets.Packet) {
	if c.ending {
		return
	}
	c.ctl = append(c.ctl, p)
	c.wakeLocked()
}

// endLocked ends c once, for the reason err: its session is detached
// (the will published unless the client disconnected normally), and the
// writer sends a DISCONNECT for a broker's reason, then closes.
func (c *conn) endLocked(err error) {
	if c.ending {
		return
	}
	var pe *protocolError
	var cd clientDisconnect
	withWill := !errors.As(err, &cd) || cd.will
	if errors.As(err, &pe) && c.started {
		c.final = &packets.Disconnect{ReasonCode: pe.code, Properties: c.reason("%s", pe.reason)}
	}
	c.stopLocked()
	c.b.detachLocked(c, withWill, false)
}

// kill ends c from elsewhere (a takeover, Close) with DISCONNECT code;
// keepSession leaves the session to the caller.
func (c *conn) killLocked(code byte, why string, keepSession bool) {
	if c.ending {
		return
	}
	if !c.started {
		c.ending = true
		_ = c.nc.Close() // still in its handshake: no DISCONNECT
		return
	}
	c.final = &packets.Disconnect{ReasonCode: code, Properties: c.reason("%s", why)}
	c.stopLocked()
	c.b.detachLocked(c, true, keepSession)
}

// stopLocked marks c ending: the writer sends final (if any), then
// closes; its writes are bounded from now on. A CONNACK not written yet
// still goes first: no DISCONNECT before the CONNACK [MQTT-3.14.0-1].
func (c *conn) stopLocked() {
	c.ending = true
	keep := 0
	if len(c.ctl) > 0 {
		if _, ok := c.ctl[0].(*packets.Connack); ok {
			keep = 1
		}
	}
	clear(c.ctl[keep:])
	c.ctl = c.ctl[:keep]
	if c.started {
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeGrace))
		c.wakeLocked()
	}
}

// item is one packet the writer sends: a control packet, or a delivery.
type item struct {
	pkt    packets.Packet
	d      *delivery
	dup    bool
	expiry uint32 // remaining Message Expiry Interval; 0: none
}

func (it item) writeTo(w io.Writer) error {
	if it.pkt != nil {
		_, err := it.pkt.WriteTo(w)
		return err
	}
	m := it.d.m
	props := m.props
	if it.expiry > 0 {
		e := it.expiry
		props.MessageExpiry = &e
	}
	p := packets.Publish{Topic: m.topic, Payload: m.payload, QoS: it.d.qos, PacketID: it.d.id, Duplicate: it.dup, Properties: &props}
	_, err := p.WriteTo(w)
	return err
}

// maxBatch bounds the packets one writer round takes under the lock.
const maxBatch = 256

// writeLoop sends what the broker queues for c, one batch per wake-up,
// never holding the broker's lock while it writes.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	bw := bufio.NewWriterSize(c.nc, 32<<10)
	var items []item
	for range c.wake {
		c.b.mu.Lock()
		if hook := c.b.testWriterRound; hook != nil {
			c.b.mu.Unlock()
			hook(c)
			c.b.mu.Lock()
		}
		var more bool
		items, more = c.collectLocked(items[:0])
		ending, final := c.ending, c.final
		if more {
			c.wakeLocked()
		}
		c.b.mu.Unlock()
		var err error
		for _, it := range items {
			if err = it.writeTo(bw); err != nil {
				break
			}
		}
		clear(items)
		if err == nil && ending && final != nil {
			_, err = final.WriteTo(bw)
		}
		if err == nil {
			err = bw.Flush()
		}
		switch {
		case err != nil:
			c.b.mu.Lock()
			c.endLocked(err)
			c.b.mu.Unlock()
			_ = c.nc.Close()
			return
		case ending:
			c.closeWrite()
			return
		}
	}
}

// collectLocked takes the writer's next batch: the control packets, then
// what is in flight again (DUP, in order), then the queue, within the
// client's Receive Maximum. more: the batch is full, more is ready.
func (c *conn) collectLocked(items []item) (_ []item, more bool) {
	for _, p := range c.ctl {
		items = append(items, item{pkt: p})
	}
	clear(c.ctl)
	c.ctl, c.pendingAcks = c.ctl[:0], 0
	s := c.session
	if c.ending || s == nil || s.conn != c {
		return items, false
	}
	now := c.b.now()
	for len(s.resend) > 0 && s.outstanding < c.receiveMax {
		if len(items) >= maxBatch {
			return items, true
		}
		d := s.resend[0]
		s.resend[0] = nil
		s.resend = s.resend[1:]
		if d.acked {
			continue
		}
		exp, ok := d.m.remaining(now)
		if !ok || c.tooBig(d.m) {
			s.removeInflight(d)
			continue
		}
		d.sent = true
		s.outstanding++
		items = append(items, item{d: d, dup: true, expiry: exp})
	}
	if len(s.resend) > 0 {
		return items, false // the resends go first: wait for quota
	}
	for len(s.queue) > 0 {
		d := s.queue[0]
		if d.qos > 0 && s.outstanding >= c.receiveMax {
			break
		}
		if len(items) >= maxBatch {
			return items, true
		}
		s.queue[0] = nil
		s.queue = s.queue[1:]
		exp, ok := d.m.remaining(now)
		if !ok || c.tooBig(d.m) {
			continue
		}
		if d.qos > 0 {
			d.id = s.newPacketID()
			d.sent = true
			s.byID[d.id] = d
			s.inflight = append(s.inflight, d)
			s.live++
			s.outstanding++
		}
		items = append(items, item{d: d, expiry: exp})
	}
	return items, false
}

// tooBig: m's PUBLISH exceeds the client's Maximum Packet Size; the broker
// drops it for this client [MQTT-3.1.2-25].
func (c *conn) tooBig(m *message) bool {
	return c.maxPacket > 0 && m.packetSize() > c.maxPacket
}
