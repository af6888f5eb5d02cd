package mqtt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one running consumer: one MQTT connection with its own
// stable client id and session, and the inbox paho's callback fills.
type subscription struct {
	c         *conn
	spec      ports.SubscriptionSpec
	filter    string
	qos       byte // granted QoS asked for: 1, or 0 for BestEffort
	clientID  string
	instance  string // the Instance named in clientID
	endOnStop bool   // Broadcast without InstanceTTL: the session ends at Close

	sess *ackSession
	cm   *autopaho.ConnectionManager

	report atomic.Pointer[func(error)] // the portable layer's Errors (SetReport)

	mu     sync.Mutex
	ready  []*entry          // the inbox: received, not handed out
	byID   map[string]*entry // entries by message id, until acknowledged
	recs   []driver.Record   // ReceiveBatch's result, reused
	closed bool
	ups    int       // connections made
	first  chan bool // the first CONNACK's session-present flag
	wg     sync.WaitGroup
	dead   context.Context // done, with a *SessionTakenOverError cause, once the session was taken over
	kill   context.CancelCauseFunc
	upAt   time.Time       // when the current connection came up
	quick  int             // connections in a row the broker closed soon after accepting them
	failed atomic.Bool     // a connection attempt failed since the last one came up
	lost   context.Context // done when the current connection ends
	lose   context.CancelFunc
	signal chan struct{} // capacity 1: an entry was queued
	stopCh chan struct{} // closed by Close
}

var (
	_ driver.Subscription = (*subscription)(nil)
	_ driver.Reporter     = (*subscription)(nil)
	_ driver.Requeuer     = (*subscription)(nil)
)

// entry is one message received and not acknowledged, the record's Handle.
// A DUP copy with its id on a new connection updates its ticket instead.
type entry struct {
	id       string
	pub      *paho.Publish
	ticket   ackTicket
	dup      bool // delivered before (DUP)
	requeues int  // handed out again by SendRequeues
	owed     bool // acknowledged, but its connection closed before the PUBACK
	owedAt   int  // connection count when the PUBACK became owed
	received time.Time
}

// Subscribe connects the subscription's own connection (CleanStart false,
// Receive Maximum = InFlight) and subscribes at QoS 1 (0 for BestEffort).
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	var bad error
	if spec.Mode == ports.LoadBalance {
		bad = checkName("SubscriptionSpec.Group", spec.Group, shareWhy)
	}
	if spec.Instance != "" {
		bad = cmp.Or(bad, checkName("SubscriptionSpec.Instance", spec.Instance, ""))
	}
	if bad != nil {
		return nil, bad
	}
	s := &subscription{c: c, spec: spec, filter: c.filter(spec), qos: 1, byID: map[string]*entry{},
		first: make(chan bool, 1), signal: make(chan struct{}, 1), stopCh: make(chan struct{})}
	s.lost, s.lose = context.WithCancel(context.Background())
	s.dead, s.kill = context.WithCancelCause(context.Background())
	if spec.QoS == ports.BestEffort {
		s.qos = 0
	}
	expiry := seconds(c.opts.SessionExpiry)
	if spec.Mode == ports.Broadcast {
		if spec.InstanceTTL > 0 {
			expiry = seconds(spec.InstanceTTL)
		} else {
			expiry, s.endOnStop = seconds(c.opts.ReconnectGrace), true
		}
	}
	if err := c.register(s); err != nil {
		return nil, err
	}
	s.sess = newAckSession(state.NewInMemory())
	s.sess.onLost = s.onLost
	rm := spec.InFlight
	if c.opts.ReceiveMaximum > 0 {
		rm = c.opts.ReceiveMaximum
	}
	cm, err := c.connect(ctx, connSpec{
		clientID: s.clientID, expiry: expiry, receiveMax: uint16(min(rm, 65535)),
		session: s.sess, onPublish: s.onPublish, onUp: s.onUp, report: s.reportErr, disconnect: s.disconnectPacket,
		stayDown: s.takenOver, onConnectError: func() { s.failed.Store(true) },
	})
	if err != nil {
		c.forget(s)
		return nil, err
	}
	s.cm = cm
	var resumed bool
	select {
	case resumed = <-s.first:
	case <-ctx.Done():
		_ = s.Close(context.Background())
		return nil, ctx.Err()
	}
	// Even on a resumed session: mosquitto 2.0.11 does not restore a shared
	// subscription from its persistence file, yet reports the session.
	if err := s.subscribeFirst(ctx, resumed); err != nil {
		_ = s.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// SetReport implements driver.Reporter: connection events and a session
// takeover go to Errors.
func (s *subscription) SetReport(report func(error)) { s.report.Store(&report) }

func (s *subscription) reportErr(err error) {
	if r := s.report.Load(); r != nil {
		(*r)(err)
	}
}

// errSubscribeRefused marks a SUBACK that did not grant the QoS asked for.
var errSubscribeRefused = errors.New("subscription refused")

// subscribeFirst subscribes on the first connection; when that ends
// before the SUBACK, it subscribes again on the next, until ctx is done.
func (s *subscription) subscribeFirst(ctx context.Context, resumed bool) error {
	for {
		s.mu.Lock()
		lost := s.lost
		s.mu.Unlock()
		actx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(lost, cancel)
		err := subscribe(actx, s.cm, s.filter, s.qos, resumed)
		stop()
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, errSubscribeRefused) || ctx.Err() != nil {
			return err
		}
		// Retry only if the connection did end.
		t := time.NewTimer(s.c.opts.ConnectTimeout)
		select {
		case <-lost.Done():
			t.Stop()
		case <-t.C:
			return err
		case <-ctx.Done():
			t.Stop()
			return err
		}
		if s.takenOver() {
			return err
		}
		if err := s.cm.AwaitConnection(ctx); err != nil {
			return fmt.Errorf("mqtt: subscribe %s: the connection was lost and did not come back: %w", s.filter, err)
		}
	}
}

// register gives s its unique client id: the spec's instance, or for a
// LoadBalance member the adapter's Instance ("-2", "-3"... for further
// members in this process), or a random one for Broadcast.
func (c *conn) register(s *subscription) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ports.ErrClosed
	}
	inst := s.spec.Instance
	switch {
	case inst != "":
		s.clientID, s.instance = clientID(c.opts.Namespace, s.spec, inst), inst
		if c.subs[s.clientID] != nil {
			return &ports.ValueError{Field: "SubscriptionSpec.Instance", Reason: fmt.Sprintf("%q is already subscribed to %s in this adapter", inst, s.spec.Topic)}
		}
	case s.spec.Mode == ports.LoadBalance:
		for k := 1; ; k++ {
			inst = c.opts.Instance
			if k > 1 {
				inst += "-" + strconv.Itoa(k)
			}
			if s.clientID = clientID(c.opts.Namespace, s.spec, inst); c.subs[s.clientID] == nil {
				s.instance = inst
				break
			}
		}
	default:
		s.instance = randomID()
		s.clientID = clientID(c.opts.Namespace, s.spec, s.instance)
	}
	c.subs[s.clientID] = s
	return nil
}

func (c *conn) forget(s *subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s.clientID)
}

// subscribe sends SUBSCRIBE and checks the granted QoS. mochi's 0x91
// (packet id in use by its resumed publishes) is retried; on a resumed
// session the kept subscription is then accepted.
func subscribe(ctx context.Context, cm *autopaho.ConnectionManager, filter string, qos byte, resumed bool) error {
	var err error
	for range 4 {
		var sa *paho.Suback
		sa, err = cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
		if sa != nil && len(sa.Reasons) == 1 && sa.Reasons[0] == 0x91 {
			continue
		}
		if err != nil {
			return fmt.Errorf("mqtt: subscribe %s: %w", filter, err)
		}
		if len(sa.Reasons) != 1 || sa.Reasons[0] != qos {
			return fmt.Errorf("mqtt: subscribe %s: broker answered %v, want QoS %d granted: %w", filter, sa.Reasons, qos, errSubscribeRefused)
		}
		return nil
	}
	if resumed {
		return nil
	}
	return fmt.Errorf("mqtt: subscribe %s: packet identifier in use on every attempt: %w", filter, err)
}

// onPublish is paho's receive handler, on paho's goroutine: it records the
// arrival order, matches a redelivered copy to its entry, queues the rest.
func (s *subscription) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	t := s.sess.arrived(p.PacketID, p.QoS)
	id := userProperty(p, ports.HeaderID)
	if s.c.arrived != nil {
		s.c.arrived(id, p.Duplicate())
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock() // never acknowledged: redelivered when the session resumes
		return true, nil
	}
	if e := s.byID[id]; e != nil && id != "" && p.Duplicate() {
		if !e.owed {
			e.ticket, e.pub = t, p // the same message on the new connection
			s.mu.Unlock()
			return true, nil
		}
		delete(s.byID, id)
		s.mu.Unlock()
		var gone [1]bool
		if err := s.sess.releaseAll([]ackTicket{t}, gone[:]); err != nil {
			s.reportErr(fmt.Errorf("mqtt: PUBACK of redelivered %s: %w", id, err))
		}
		return true, nil
	}
	e := &entry{id: id, pub: p, ticket: t, dup: p.Duplicate(), received: time.Now()}
	if id != "" {
		s.byID[id] = e
	}
	s.ready = append(s.ready, e)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
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
		dead, closed := context.Cause(s.dead), s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, ports.ErrClosed
		case dead != nil:
			return nil, dead
		}
		select {
		case <-s.signal:
		case <-s.dead.Done():
		case <-s.stopCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// record is e as a driver record, with headers of its own.
func (e *entry) record(topic ports.Topic) driver.Record {
	h := headersOf(e.pub)
	r := driver.Record{Message: ports.Message{Topic: topic, Key: h[ports.HeaderPartitionKey], Payload: e.pub.Payload, Headers: h},
		ReceivedAt: e.received, Handle: e}
	r.RedeliveryCount = e.requeues
	if e.dup {
		r.RedeliveryCount++
	}
	if e.pub.QoS == 0 {
		r.Message.QoS = ports.BestEffort
	}
	return r
}

// SendAcks releases the PUBACKs of handles with one write (acks.go). A
// delivery whose connection closed owes its PUBACK to the DUP copy,
// acknowledged on arrival and not handed out: nil for it too.
func (s *subscription) SendAcks(_ context.Context, handles []any) error {
	es := make([]*entry, len(handles))
	for i, h := range handles {
		es[i] = h.(*entry)
	}
	for len(es) > 0 {
		ts, gone := make([]ackTicket, len(es)), make([]bool, len(es))
		s.mu.Lock()
		for i, e := range es {
			ts[i] = e.ticket
		}
		s.mu.Unlock()
		werr := s.sess.releaseAll(ts, gone)
		var again []*entry
		s.mu.Lock()
		for i, e := range es {
			switch {
			case !gone[i] && werr == nil:
				if s.byID[e.id] == e {
					delete(s.byID, e.id)
				}
			case e.ticket != ts[i]: // a redelivered copy arrived meanwhile: acknowledge that one
				again = append(again, e)
			default:
				e.owed, e.owedAt = true, s.ups
			}
		}
		s.mu.Unlock()
		es = again
	}
	return nil
}

// SendRequeues requeues locally: no PUBACK, handed out again, counted. The
// session keeps them across a crash; a copy on the topic would reach every
// group and Broadcast instance (docs/adapters/mqtt.md).
func (s *subscription) SendRequeues(_ context.Context, handles []any, _ time.Duration) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ports.ErrClosed
	}
	for _, h := range handles {
		e := h.(*entry)
		e.requeues++
		s.ready = append(s.ready, e)
	}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return nil
}

// A session takeover shows as DISCONNECT 0x8E (mochi) or, without a reason
// (mosquitto 2.0), as a takeover war: takeoverQuick connections in a row
// closed within takeoverWindow of acceptance, no attempt failing between.
const (
	takeoverQuick  = 5
	takeoverWindow = 2 * time.Second
)

// onLost runs on paho's goroutine when the connection ended (dp: the
// broker's DISCONNECT, then nil). A takeover is reported once and keeps the
// connection down.
func (s *subscription) onLost(dp *packets.Disconnect) {
	s.mu.Lock()
	if dp == nil {
		s.lose()
	}
	if s.closed || s.dead.Err() != nil {
		s.mu.Unlock()
		return
	}
	var reason string
	switch {
	case dp != nil && dp.ReasonCode == reasonSessionTakenOver:
		reason = "sent DISCONNECT reason 0x8E, session taken over"
		if dp.Properties != nil && dp.Properties.ReasonString != "" {
			reason += ": " + dp.Properties.ReasonString
		}
	case dp != nil:
		s.mu.Unlock()
		return // the nil call that follows counts this loss
	default:
		if !s.upAt.IsZero() && time.Since(s.upAt) < takeoverWindow && !s.failed.Load() {
			s.quick++
		} else {
			s.quick = 0
		}
		s.upAt = time.Time{}
		if s.quick < takeoverQuick {
			s.mu.Unlock()
			return
		}
		reason = fmt.Sprintf("closed %d connections in a row within %v of accepting them, without a DISCONNECT reason: another connection with the same client id keeps taking the session", s.quick, takeoverWindow)
	}
	err := &SessionTakenOverError{Instance: s.instance, ClientID: s.clientID, Reason: reason}
	s.kill(err)
	s.mu.Unlock()
	s.c.opts.Logger.Error("sluice mqtt: session taken over: two running instances share one Instance; this subscription stopped receiving",
		"instance", s.instance, "client", s.clientID, "topic", string(s.spec.Topic), "error", err)
	s.reportErr(err)
}

// takenOver reports whether the session was taken over (see onLost).
func (s *subscription) takenOver() bool { return s.dead.Err() != nil }

// onUp runs on autopaho's goroutine when a connection came up; after a
// reconnect it subscribes again (see Subscribe).
func (s *subscription) onUp(cm *autopaho.ConnectionManager, ca *paho.Connack) {
	s.mu.Lock()
	s.ups++
	s.upAt = time.Now()
	s.failed.Store(false)
	if s.lost.Err() != nil {
		s.lost, s.lose = context.WithCancel(context.Background())
	}
	reconnect := s.ups > 1
	for id, e := range s.byID {
		// The broker redelivers right after CONNACK or never.
		if e.owed && e.owedAt < s.ups-1 {
			delete(s.byID, id)
		}
	}
	resubscribe := reconnect && !s.closed
	if resubscribe {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if !reconnect {
		s.first <- ca.SessionPresent
		return
	}
	s.c.opts.Logger.Info("sluice mqtt: reconnected", "client", s.clientID, "session_present", ca.SessionPresent)
	if !ca.SessionPresent {
		s.reportErr(connError(s.clientID, "reconnect", ErrSessionLost))
	}
	if !resubscribe {
		return
	}
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.ConnectTimeout)
		defer cancel()
		if err := subscribe(ctx, cm, s.filter, s.qos, ca.SessionPresent); err != nil {
			s.reportErr(connError(s.clientID, "resubscribe", err))
		}
	}()
}

// disconnectPacket is Close's DISCONNECT: a Broadcast instance without
// InstanceTTL ends its session (expiry 0); others keep it.
func (s *subscription) disconnectPacket() *paho.Disconnect {
	d := &paho.Disconnect{}
	if s.endOnStop {
		d.Properties = &paho.DisconnectProperties{SessionExpiryInterval: new(uint32)}
	}
	return d
}

// Close disconnects, acknowledging nothing more. After PUBACKs were written
// it first makes one round trip (an UNSUBSCRIBE, at most 2s): a socket
// closed right after the DISCONNECT can reset with PUBACKs unread.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.ready = nil
	s.mu.Unlock()
	close(s.stopCh)
	if s.sess.takeWrote() {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = s.cm.Unsubscribe(bctx, &paho.Unsubscribe{Topics: []string{s.c.opts.Namespace + "/sluice-barrier"}})
		cancel()
	}
	if s.spec.Mode == ports.LoadBalance && s.c.opts.LeaveGroupOnStop {
		if _, err := s.cm.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{s.filter}}); err != nil {
			s.reportErr(fmt.Errorf("mqtt: leave group %s: %w", s.filter, err))
		}
	}
	err := s.cm.Disconnect(ctx)
	s.wg.Wait()
	s.c.forget(s)
	return err
}

// SessionTakenOverError reports that the broker handed the session of
// Instance to another connection: two running instances share it. The
// displaced subscription reports it on Errors, stays disconnected and
// fails Receive once its inbox is empty. It matches
// ports.ErrInstanceShared.
type SessionTakenOverError struct {
	Instance string
	ClientID string
	Reason   string // how the takeover showed (the broker's reason, or the takeover war)
}

func (e *SessionTakenOverError) Error() string {
	msg := fmt.Sprintf("mqtt: the session of instance %q (client id %s) was taken over by another connection with the same client id: two running instances share the instance %q; this one stopped receiving — give each running instance its own Instance",
		e.Instance, e.ClientID, e.Instance)
	if e.Reason != "" {
		msg += " (the broker " + e.Reason + ")"
	}
	return msg
}

// Is matches ports.ErrInstanceShared.
func (e *SessionTakenOverError) Is(target error) bool { return target == ports.ErrInstanceShared }
