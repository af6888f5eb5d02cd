package mqtt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one running consumer: one MQTT connection with its own
// stable client id and session (paho's state wrapped by ackSession), and
// the inbox paho's callback fills.
type subscription struct {
	c          *conn
	spec       ports.SubscriptionSpec
	filter     string
	qos        byte // the QoS subscribed at: 1, or 0 for BestEffort
	clientID   string
	instance   string // the Instance named in clientID
	expiry     uint32 // the session expiry interval, seconds
	receiveMax uint16 // 0: the protocol default (65535)
	endOnStop  bool   // Broadcast without InstanceTTL: the session ends at Close
	declaring  bool   // DeclareGroup's: Close leaves the share whatever LeaveGroupOnStop says
	cm         *autopaho.ConnectionManager

	kit.Reports                // connection events and a session takeover go to Errors
	first       chan error     // the first SUBACK's outcome, for Subscribe
	started     atomic.Bool    // first has it
	failed      atomic.Bool    // a connection attempt failed since the last one came up
	wg          sync.WaitGroup // onUp's SUBSCRIBEs

	mu        sync.Mutex
	ready     []*entry          // the inbox: received, not handed out
	byID      map[string]*entry // QoS 1 entries by message id, until their PUBACK is written
	recs      []driver.Record   // ReceiveBatch's result, reused
	signal    chan struct{}     // capacity 1: an entry was queued
	closed    bool
	dead      context.Context // done at Close, or with a *SessionTakenOverError cause
	kill      context.CancelCauseFunc
	ups       int             // connections made: the current one's number
	up        context.Context // done when the current connection ends
	down      context.CancelFunc
	upAt      time.Time   // when the current connection came up
	quick     int         // connections in a row the broker closed soon after accepting them
	displaced time.Time   // the last DISCONNECT 0x8E
	w         io.Writer   // the current connection; nil while down
	order     []*entry    // its QoS 1 deliveries in arrival order, not yet PUBACKed
	writing   bool        // a caller of flushLocked writes
	recycling bool        // Abandon will close the current connection
	dropping  atomic.Bool // Abandon closed the current connection
	wrote     bool        // a PUBACK was written
	buf       []byte      // the writer's PUBACKs, reused
}

var (
	_ driver.Subscription = (*subscription)(nil)
	_ driver.Abandoner    = (*subscription)(nil)
	_ driver.Reporter     = (*subscription)(nil)
	_ driver.Requeuer     = (*subscription)(nil)
)

// entry is one message received and not acknowledged, the record's Handle.
// A DUP copy with its id on a new connection takes its place in order.
type entry struct {
	id       string
	pub      *paho.Publish // the last copy received
	headers  ports.Headers
	dup      bool // delivered before (DUP)
	requeues int  // handed out again by SendRequeues
	acked    bool // settled: its PUBACK goes out in arrival order
	ackedOn  int  // the connection it was acked on
	received time.Time
}

// Subscribe connects the subscription's own connection (CleanStart false,
// Receive Maximum = InFlight) and subscribes at QoS 1 (0 for BestEffort).
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	return c.newSubscription(ctx, spec, false)
}

func (c *conn) newSubscription(ctx context.Context, spec ports.SubscriptionSpec, declaring bool) (*subscription, error) {
	var err error
	if spec.Mode == ports.LoadBalance {
		err = checkName("SubscriptionSpec.Group", spec.Group, " (it names the MQTT shared subscription)")
	}
	if spec.Instance != "" {
		err = cmp.Or(err, checkName("SubscriptionSpec.Instance", spec.Instance, ""))
	}
	if err != nil {
		return nil, err
	}
	s := &subscription{c: c, spec: spec, filter: c.filter(spec), qos: 1, declaring: declaring,
		expiry: seconds(c.opts.SessionExpiry), receiveMax: uint16(min(cmp.Or(c.opts.ReceiveMaximum, spec.InFlight), 65535)),
		first: make(chan error, 1), byID: map[string]*entry{}, signal: make(chan struct{}, 1)}
	s.dead, s.kill = context.WithCancelCause(context.Background())
	if spec.QoS == ports.BestEffort {
		s.qos = 0
	}
	if spec.Mode == ports.Broadcast {
		if spec.InstanceTTL > 0 {
			s.expiry = seconds(spec.InstanceTTL)
		} else {
			s.expiry, s.endOnStop = seconds(c.opts.ReconnectGrace), true
		}
	}
	if err := c.register(s); err != nil {
		return nil, err
	}
	if s.cm, err = c.connect(ctx, s.clientID, s); err != nil {
		s.wg.Wait()
		c.forget(s)
		return nil, err
	}
	select {
	case err = <-s.first:
	case <-s.dead.Done():
		err = context.Cause(s.dead)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = s.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// register gives s its unique client id: of the spec's Instance, or for a
// LoadBalance member without one of the adapter's Instance ("-2", "-3"...
// for further members in this process). The portable layer names every
// Broadcast instance.
func (c *conn) register(s *subscription) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ports.ErrClosed
	}
	s.instance = cmp.Or(s.spec.Instance, c.opts.Instance)
	for k := 2; ; k++ {
		if s.clientID = clientID(c.opts.Namespace, s.spec, s.instance); c.subs[s.clientID] == nil {
			break
		}
		if s.spec.Instance != "" {
			return &ports.ValueError{Field: "SubscriptionSpec.Instance", Reason: fmt.Sprintf("%q is already subscribed to %s in this adapter", s.instance, s.spec.Topic)}
		}
		s.instance = c.opts.Instance + "-" + strconv.Itoa(k)
	}
	c.subs[s.clientID] = s
	return nil
}

func (c *conn) forget(s *subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s.clientID)
}

// subscribe sends SUBSCRIBE on cm and checks the granted QoS.
func (s *subscription) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) error {
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: s.filter, QoS: s.qos}}})
	switch {
	case err != nil:
		return fmt.Errorf("mqtt: subscribe %s: %w", s.filter, err)
	case len(sa.Reasons) != 1 || sa.Reasons[0] != s.qos:
		return fmt.Errorf("mqtt: subscribe %s: broker answered %v, want QoS %d granted", s.filter, sa.Reasons, s.qos)
	}
	return nil
}

// onUp runs on autopaho's goroutine when a connection came up. It
// subscribes on every connection, even on a resumed session: mosquitto
// 2.0.11 does not restore a shared subscription from its persistence file,
// yet reports the session. The first SUBACK that is not lost with its
// connection decides Subscribe.
func (s *subscription) onUp(cm *autopaho.ConnectionManager, ca *paho.Connack) {
	s.mu.Lock()
	up, n, closed := s.up, s.ups, s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if n > 1 {
		s.c.opts.Logger.Info("sluice mqtt: reconnected", "client", s.clientID, "session_present", ca.SessionPresent)
		if !ca.SessionPresent {
			s.Report(connError(s.clientID, "reconnect", ErrSessionLost))
		}
	}
	if closed {
		return
	}
	go func() {
		defer s.wg.Done()
		// Unsubscribed, it receives nothing: retry, reporting, while it lasts.
		_ = kit.Reconnect(up, kit.DefaultBackoff, func(context.Context) error {
			return s.subscribeOn(up, cm)
		}, func(err error) { s.Report(connError(s.clientID, "resubscribe", err)) })
	}()
}

// subscribeOn subscribes on the connection whose life is up; the first
// connection's answer decides Subscribe. It returns nil once nothing is
// left to do on this connection: subscribed, Subscribe decided, or the
// connection gone (its successor subscribes).
func (s *subscription) subscribeOn(up context.Context, cm *autopaho.ConnectionManager) error {
	ctx, cancel := context.WithTimeout(up, s.c.opts.ConnectTimeout)
	err := s.subscribe(ctx, cm)
	cancel()
	// A SUBSCRIBE to a socket the broker closed (the session taken) fails
	// before the reader sees the loss: the connection is gone all the same.
	var oe *net.OpError
	gone := up.Err() != nil || errors.As(err, &oe) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
	switch {
	case (err == nil || !gone) && s.started.CompareAndSwap(false, true):
		s.first <- err
		return nil
	case err == nil || gone:
		return nil
	}
	return err
}

// onPublish is paho's receive handler, on paho's goroutine: it records the
// arrival order, matches a redelivered copy to its entry, queues the rest.
func (s *subscription) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	h := headersOf(p)
	id := h.Get(ports.HeaderID)
	if s.c.arrived != nil {
		s.c.arrived(id, p.Duplicate())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true, nil // never acknowledged: redelivered when the session resumes
	}
	e := s.byID[id]
	if e == nil || !p.Duplicate() {
		e = &entry{id: id, pub: p, headers: h, dup: p.Duplicate(), received: time.Now()}
		s.ready = append(s.ready, e)
		kit.Signal(s.signal)
		if p.QoS == 0 {
			return true, nil
		}
		if id != "" {
			s.byID[id] = e
		}
	}
	// A DUP copy of an entry still held takes its place; one of an entry
	// acked on a connection now closed is PUBACKed and not handed out.
	e.pub = p
	s.order = append(s.order, e)
	if e.acked {
		s.flushLocked()
	}
	return true, nil
}

// ReceiveBatch hands out up to max received messages; once the session was
// taken over and the inbox is empty, it fails with a *SessionTakenOverError.
func (s *subscription) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		s.mu.Lock()
		if n := min(max, len(s.ready)); n > 0 {
			recs := s.recs[:0]
			for _, e := range s.ready[:n] {
				recs = append(recs, e.record(s.spec.Topic))
			}
			clear(s.ready[:n])
			s.ready, s.recs = s.ready[n:], recs
			s.mu.Unlock()
			return recs, nil
		}
		s.mu.Unlock()
		if err := context.Cause(s.dead); err != nil {
			return nil, err
		}
		select {
		case <-s.signal:
		case <-s.dead.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// record is e as a driver record; a requeued entry's headers are a copy.
func (e *entry) record(topic ports.Topic) driver.Record {
	h := e.headers
	if e.requeues > 0 {
		h = h.Clone()
	}
	r := driver.Record{Message: ports.Message{Topic: topic, Key: h.Get(ports.HeaderPartitionKey), Payload: e.pub.Payload, Headers: h},
		RedeliveryCount: e.requeues, ReceivedAt: e.received, Handle: e}
	if e.dup {
		r.RedeliveryCount++
	}
	if e.pub.QoS == 0 {
		r.Message.QoS = ports.BestEffort
	}
	return r
}

// SendRequeues requeues locally: no PUBACK, handed out again, counted. The
// session keeps them across a crash; a copy on the topic would reach every
// group and Broadcast instance (docs/adapters/mqtt.md).
func (s *subscription) SendRequeues(_ context.Context, handles []any, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ports.ErrClosed
	}
	for _, h := range handles {
		e := h.(*entry)
		e.requeues++
		s.ready = append(s.ready, e)
	}
	kit.Signal(s.signal)
	return nil
}

// disconnect is Close's DISCONNECT: a Broadcast instance without
// InstanceTTL ends its session (expiry 0); others keep it.
func (s *subscription) disconnect() *paho.Disconnect {
	if s.endOnStop {
		return &paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: new(uint32)}}
	}
	return &paho.Disconnect{}
}

// Close disconnects, acknowledging nothing more. After PUBACKs were written
// it first makes one round trip (an UNSUBSCRIBE, at most 2s): a socket
// closed right after the DISCONNECT can reset with PUBACKs unread.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed, s.ready = true, nil
	wrote := s.wrote
	s.mu.Unlock()
	s.kill(ports.ErrClosed)
	if wrote {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = s.cm.Unsubscribe(bctx, &paho.Unsubscribe{Topics: []string{s.c.opts.Namespace + "/sluice-barrier"}})
		cancel()
	}
	if s.spec.Mode == ports.LoadBalance && s.c.opts.LeaveGroupOnStop && !s.declaring {
		if _, err := s.cm.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{s.filter}}); err != nil {
			s.Report(fmt.Errorf("mqtt: leave group %s: %w", s.filter, err))
		}
	}
	err := s.cm.Disconnect(ctx)
	s.wg.Wait()
	s.c.forget(s)
	return err
}
