package embedded

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"go.uber.org/goleak"
)

// wait bounds every wait of these tests for something the broker does.
const wait = 10 * time.Second

// start starts a broker closed (and checked for leaks) at the end of t.
func start(t *testing.T, opts Options) *Broker {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	b, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		goleak.VerifyNone(t, leaks)
	})
	return b
}

// client is a raw MQTT 5 client: every packet is written and read by the
// test, so that it controls when (and whether) it acknowledges.
type client struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	mu sync.Mutex // writes
	id uint16     // last packet id used
}

func dial(t *testing.T, b *Broker) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", b.Addr(), wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func dialTLS(t *testing.T, b *Broker, cfg *tls.Config) *client {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", b.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// connectOpts are the CONNECT fields the tests vary.
type connectOpts struct {
	id         string
	clean      bool
	expiry     uint32 // session expiry interval, seconds
	receiveMax uint16 // 0: the protocol default
	keepAlive  uint16
	user, pass string
	will       *packets.Publish
	willDelay  uint32
}

func (o connectOpts) packet() *packets.Connect {
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: o.id, CleanStart: o.clean, KeepAlive: o.keepAlive,
		Properties: &packets.Properties{}}
	if o.expiry > 0 {
		cp.Properties.SessionExpiryInterval = &o.expiry
	}
	if o.receiveMax > 0 {
		cp.Properties.ReceiveMaximum = &o.receiveMax
	}
	if o.user != "" {
		cp.UsernameFlag, cp.Username = true, o.user
	}
	if o.pass != "" {
		cp.PasswordFlag, cp.Password = true, []byte(o.pass)
	}
	if o.will != nil {
		cp.WillFlag, cp.WillTopic, cp.WillMessage, cp.WillQOS = true, o.will.Topic, o.will.Payload, o.will.QoS
		cp.WillProperties = &packets.Properties{}
		if o.willDelay > 0 {
			cp.WillProperties.WillDelayInterval = &o.willDelay
		}
	}
	return cp
}

// connect sends CONNECT and returns the CONNACK.
func (c *client) connect(o connectOpts) *packets.Connack {
	c.t.Helper()
	c.send(o.packet())
	ca, ok := c.read().Content.(*packets.Connack)
	if !ok {
		c.t.Fatal("the first packet from the broker is not a CONNACK")
	}
	return ca
}

// connected connects and fails the test unless the CONNACK accepts.
func connected(t *testing.T, b *Broker, o connectOpts) (*client, *packets.Connack) {
	t.Helper()
	c := dial(t, b)
	ca := c.connect(o)
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK reason 0x%02X %q, want 0", ca.ReasonCode, ca.Properties.ReasonString)
	}
	return c, ca
}

func (c *client) send(p interface {
	WriteTo(io.Writer) (int64, error)
}) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(wait))
	if _, err := p.WriteTo(c.nc); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next packet, failing the test after wait.
func (c *client) read() *packets.ControlPacket {
	c.t.Helper()
	p, err := c.tryRead(wait)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return p
}

func (c *client) tryRead(d time.Duration) (*packets.ControlPacket, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	return packets.ReadPacket(c.br)
}

// publishPacket reads the next packet, which must be a PUBLISH.
func (c *client) publishPacket() *packets.Publish {
	c.t.Helper()
	pk := c.read()
	p, ok := pk.Content.(*packets.Publish)
	if !ok {
		c.t.Fatalf("got %s, want PUBLISH", pk.PacketType())
	}
	return p
}

// expectPublish reads the next PUBLISH and checks its payload.
func (c *client) expectPublish(payload string) *packets.Publish {
	c.t.Helper()
	p := c.publishPacket()
	if string(p.Payload) != payload {
		c.t.Fatalf("got PUBLISH %q on %q, want %q", p.Payload, p.Topic, payload)
	}
	return p
}

func (c *client) puback(id uint16) {
	c.t.Helper()
	c.send(&packets.Puback{PacketID: id, Properties: &packets.Properties{}})
}

// subscribe subscribes at QoS 1 (or as given) and returns the SUBACK's
// reason codes.
func (c *client) subscribe(subs ...packets.SubOptions) []byte {
	c.t.Helper()
	c.id++
	c.send(&packets.Subscribe{PacketID: c.id, Subscriptions: subs, Properties: &packets.Properties{}})
	pk := c.read()
	sa, ok := pk.Content.(*packets.Suback)
	if !ok || sa.PacketID != c.id {
		c.t.Fatalf("got %s, want the SUBACK of packet %d", pk.PacketType(), c.id)
	}
	return sa.Reasons
}

func (c *client) sub(filters ...string) {
	c.t.Helper()
	var subs []packets.SubOptions
	for _, f := range filters {
		subs = append(subs, packets.SubOptions{Topic: f, QoS: 1})
	}
	for i, r := range c.subscribe(subs...) {
		if r != 1 {
			c.t.Fatalf("SUBACK reason 0x%02X for %q, want QoS 1 granted", r, filters[i])
		}
	}
}

// publish publishes at QoS 1 and returns the PUBACK's reason code; the
// broker must not send this client anything else meanwhile.
func (c *client) publish(topic, payload string, props *packets.Properties) byte {
	c.t.Helper()
	if props == nil {
		props = &packets.Properties{}
	}
	c.id++
	c.send(&packets.Publish{Topic: topic, Payload: []byte(payload), QoS: 1, PacketID: c.id, Properties: props})
	pk := c.read()
	pa, ok := pk.Content.(*packets.Puback)
	if !ok || pa.PacketID != c.id {
		c.t.Fatalf("got %s, want the PUBACK of packet %d", pk.PacketType(), c.id)
	}
	return pa.ReasonCode
}

// mustPublish publishes at QoS 1 and fails unless it was routed.
func (c *client) mustPublish(topic, payload string) {
	c.t.Helper()
	if r := c.publish(topic, payload, nil); r != 0 {
		c.t.Fatalf("PUBACK reason 0x%02X publishing %q to %q, want 0", r, payload, topic)
	}
}

// disconnected reads until the broker closes: its DISCONNECT (nil if it
// sent none), then the end of the connection.
func (c *client) disconnected() *packets.Disconnect {
	c.t.Helper()
	var dp *packets.Disconnect
	for {
		pk, err := c.tryRead(wait)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("the broker did not close the connection within %v", wait)
			}
			return dp
		}
		if d, ok := pk.Content.(*packets.Disconnect); ok {
			dp = d
		}
	}
}

// expectDisconnect reads until the broker closes and checks its
// DISCONNECT's reason code.
func (c *client) expectDisconnect(code byte) *packets.Disconnect {
	c.t.Helper()
	dp := c.disconnected()
	if dp == nil || dp.ReasonCode != code {
		c.t.Fatalf("broker closed with DISCONNECT %v, want reason 0x%02X", describe(dp), code)
	}
	return dp
}

func describe(dp *packets.Disconnect) string {
	if dp == nil {
		return "none"
	}
	return fmt.Sprintf("0x%02X %q", dp.ReasonCode, dp.Properties.ReasonString)
}

// state is what the broker holds for a session.
type state struct {
	exists, connected             bool
	queued, inflight, outstanding int
}

func (b *Broker) state(id string) state {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return state{}
	}
	return state{exists: true, connected: s.conn != nil, queued: len(s.queue), inflight: s.live, outstanding: s.outstanding}
}

// waitFor polls cond (under no lock) until it holds, failing after wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", wait, what)
		}
		time.Sleep(2 * time.Millisecond) // polling the broker's state, bounded by the deadline
	}
}

// sessionEnds returns a channel that receives the id and time of every
// session that ends.
func sessionEnds(b *Broker) <-chan ended {
	ch := make(chan ended, 64)
	b.mu.Lock()
	b.testSessionEnded = func(id string) { ch <- ended{id, time.Now()} }
	b.mu.Unlock()
	return ch
}

type ended struct {
	id string
	at time.Time
}

// awaitEnd waits for session id to end.
func awaitEnd(t *testing.T, ch <-chan ended, id string) time.Time {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case e := <-ch:
			if e.id == id {
				return e.at
			}
		case <-timeout:
			t.Fatalf("session %s did not end within %v", id, wait)
		}
	}
}

// fakeClock is the broker's message-expiry clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func useFakeClock(b *Broker) *fakeClock {
	c := &fakeClock{now: time.Now()}
	b.mu.Lock()
	b.now = c.Now
	b.mu.Unlock()
	return c
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func userProps(kv ...string) []packets.User {
	var u []packets.User
	for i := 0; i < len(kv); i += 2 {
		u = append(u, packets.User{Key: kv[i], Value: kv[i+1]})
	}
	return u
}

func ptr[T any](v T) *T { return &v }

func hasPrefix(s, prefix string) bool { return strings.HasPrefix(s, prefix) }
