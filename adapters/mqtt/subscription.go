package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one running consumer: one MQTT connection with its own
// stable client id and session, a ready queue, a local scheduler and the
// entries it has not finished.
type subscription struct {
	a         *Adapter
	spec      ports.SubscriptionSpec
	filter    string
	qos       byte // granted QoS asked for: 1, or 0 for BestEffort
	clientID  string
	instance  string // the Instance named in clientID
	endOnStop bool   // Broadcast without InstanceTTL: the session ends at Stop

	sess  *ackSession
	cm    *autopaho.ConnectionManager
	cmSet chan struct{}       // closed once cm is set (or connecting failed: cm stays nil)
	sched *schedule.Scheduler // delayed messages and requeue backoffs
	errs  *kit.Errors

	mu     sync.Mutex
	ready  []*entry
	byID   map[string]*entry
	closed bool
	ups    int       // connections made
	first  chan bool // receives the first CONNACK's session-present flag
	wg     sync.WaitGroup
	dead   error         // the session was taken over: Receive fails with it
	deadCh chan struct{} // closed when dead is set
	upAt   time.Time     // when the current connection came up
	quick  int           // consecutive connections closed by the broker soon after it accepted them
	failed bool          // a connection attempt failed since the last connection came up
	lost   chan struct{} // closed when the current connection ends
	isLost bool          // lost is closed

	signal   chan struct{} // a ready entry was queued
	stopCh   chan struct{}
	stopOnce sync.Once
	stopDone chan struct{}
	stopErr  error
}

var _ ports.Subscription = (*subscription)(nil)

// Subscribe validates spec, connects the subscription's own MQTT connection
// (client id stable per namespace, topic, group and instance; CleanStart
// false; Receive Maximum = InFlight) and subscribes at QoS 1 (QoS 0 for
// QoS BestEffort). LoadBalance uses the shared subscription
// "$share/<group>/<ns>/<topic>" (or an adopted name, Options.Existing);
// Broadcast a plain subscription. StartEarliest and SingleActive are
// refused with ErrUnsupported. It returns once the broker granted the
// subscription.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	qos, err := checkSubscription(spec)
	if err != nil {
		return nil, err
	}
	if spec.Mode == ports.LoadBalance && !validName(spec.Group) {
		return nil, &ports.ValueError{Field: "SubscriptionSpec.Group", Reason: fmt.Sprintf("%q must not contain '/', '+', '#' or '$' (it names the MQTT shared subscription)", spec.Group)}
	}
	if spec.Instance != "" && !validName(spec.Instance) {
		return nil, &ports.ValueError{Field: "SubscriptionSpec.Instance", Reason: fmt.Sprintf("%q must not contain '/', '+', '#' or '$'", spec.Instance)}
	}
	s := &subscription{a: a, spec: spec, filter: a.filter(spec), qos: qos,
		errs: kit.NewErrors(64), byID: map[string]*entry{},
		first: make(chan bool, 1), deadCh: make(chan struct{}), lost: make(chan struct{}), cmSet: make(chan struct{}),
		signal: make(chan struct{}, 1), stopCh: make(chan struct{}), stopDone: make(chan struct{})}
	expiry := seconds(a.opts.SessionExpiry)
	if spec.Mode == ports.Broadcast {
		if spec.InstanceTTL > 0 {
			expiry = seconds(spec.InstanceTTL)
		} else {
			expiry = seconds(a.opts.ReconnectGrace)
			s.endOnStop = true
		}
	}
	if err := a.register(s); err != nil {
		return nil, err
	}
	s.sess = newAckSession(state.NewInMemory())
	s.sess.onLost = s.onLost
	s.sched = schedule.New(schedule.Options{})
	rm := spec.InFlight
	if a.opts.ReceiveMaximum > 0 {
		rm = a.opts.ReceiveMaximum
	}
	cm, err := a.connect(ctx, connSpec{
		clientID: s.clientID, expiry: expiry, receiveMax: uint16(min(rm, 65535)),
		session: s.sess, onPublish: s.onPublish, onUp: s.onUp, errs: s.errs, disconnect: s.disconnectPacket,
		stayDown: s.takenOver, onConnectError: s.onConnectError,
	})
	if err != nil {
		close(s.cmSet)
		s.sched.Stop()
		a.forget(s)
		return nil, err
	}
	s.cm = cm
	close(s.cmSet)
	var resumed bool
	select {
	case resumed = <-s.first:
	case <-ctx.Done():
		_ = s.Stop(context.Background())
		return nil, ctx.Err()
	}
	// Subscribe even when the session was resumed: mosquitto 2.0.11 does
	// not restore a shared subscription from its persistence file after a
	// restart, although it reports the session as present.
	if err := s.subscribeFirst(ctx, resumed); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	return s, nil
}

// errSubscribeRefused marks a SUBACK that did not grant QoS 1.
var errSubscribeRefused = errors.New("subscription refused")

// subscribeFirst subscribes on the first connection. When that connection
// ends before the SUBACK (another instance with the same client id took
// the session over, or the network failed), the request is abandoned and
// sent again on the next connection, until ctx is done.
func (s *subscription) subscribeFirst(ctx context.Context, resumed bool) error {
	for {
		s.mu.Lock()
		lost := s.lost
		s.mu.Unlock()
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			select {
			case <-lost:
				cancel()
			case <-done:
			}
		}()
		err := s.subscribe(actx, resumed)
		close(done)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, errSubscribeRefused) || ctx.Err() != nil {
			return err
		}
		// A transport error: paho may report it (a failed write) before
		// the connection's end is signalled. Retry only if it did end.
		t := time.NewTimer(s.a.opts.ConnectTimeout)
		select {
		case <-lost:
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

// register gives s its client id: the spec's instance, or for a
// LoadBalance member the adapter's Instance (with "-2", "-3"... for further
// members of the same group in this process), or a random one for a
// Broadcast instance. Two live subscriptions never share a client id.
func (a *Adapter) register(s *subscription) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("mqtt: subscribe: %w", ports.ErrClosed)
	}
	inst := s.spec.Instance
	switch {
	case inst != "":
		s.clientID, s.instance = clientID(a.opts.Namespace, s.spec, inst), inst
		if a.clientIDs[s.clientID] {
			return &ports.ValueError{Field: "SubscriptionSpec.Instance", Reason: fmt.Sprintf("%q is already subscribed to %s in this adapter", inst, s.spec.Topic)}
		}
	case s.spec.Mode == ports.LoadBalance:
		for k := 1; ; k++ {
			inst = a.opts.Instance
			if k > 1 {
				inst += "-" + strconv.Itoa(k)
			}
			if s.clientID = clientID(a.opts.Namespace, s.spec, inst); !a.clientIDs[s.clientID] {
				s.instance = inst
				break
			}
		}
	default:
		s.instance = randomID()
		s.clientID = clientID(a.opts.Namespace, s.spec, s.instance)
	}
	a.clientIDs[s.clientID] = true
	a.subs[s] = struct{}{}
	return nil
}

func (a *Adapter) forget(s *subscription) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.subs, s)
	delete(a.clientIDs, s.clientID)
}

// subscribe sends SUBSCRIBE at QoS 1 and checks the granted QoS.
//
// mochi shares one packet-id space between a client's requests and its
// own in-flight publishes, and answers 0x91 (packet identifier in use)
// when they collide on a resumed session. subscribe retries with the next
// ids; when every attempt collides on a resumed session it accepts the
// session's subscription as it is (a broker that answers 0x91 has kept the
// session, and mochi keeps its subscriptions with it).
func (s *subscription) subscribe(ctx context.Context, resumed bool) error {
	var err error
	for range 4 {
		var sa *paho.Suback
		sa, err = s.cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: s.filter, QoS: s.qos}}})
		if sa != nil && len(sa.Reasons) == 1 && sa.Reasons[0] == 0x91 {
			continue
		}
		if err != nil {
			return fmt.Errorf("mqtt: subscribe %s: %w", s.filter, err)
		}
		if len(sa.Reasons) != 1 || sa.Reasons[0] != s.qos {
			return fmt.Errorf("mqtt: subscribe %s: broker answered %v, want QoS %d granted: %w", s.filter, sa.Reasons, s.qos, errSubscribeRefused)
		}
		return nil
	}
	if resumed {
		return nil
	}
	return fmt.Errorf("mqtt: subscribe %s: packet identifier in use on every attempt: %w", s.filter, err)
}

// onPublish is paho's receive handler. It runs on paho's goroutine and must
// not block: it records the arrival order, matches a redelivered copy to
// its entry, and queues new messages (or hands them to the scheduler).
func (s *subscription) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	t := s.sess.arrived(p.PacketID, p.QoS)
	h := headersOf(p)
	id := h[ports.HeaderID]
	if s.a.arrived != nil {
		s.a.arrived(id, p.Duplicate())
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock() // never acknowledged: redelivered when the session resumes
		return true, nil
	}
	if e := s.byID[id]; e != nil && id != "" && p.Duplicate() {
		if e.state == stateAckOwed {
			delete(s.byID, id)
			e.state = stateDone
			s.mu.Unlock()
			if err := s.sess.release(t); err != nil {
				s.errs.Report(fmt.Errorf("mqtt: PUBACK of redelivered %s: %w", id, err))
			}
			return true, nil
		}
		e.ticket, e.pub = t, p // the same message on the new connection
		s.mu.Unlock()
		return true, nil
	}
	e := &entry{sub: s, id: id, pub: p, headers: h, ticket: t, received: time.Now()}
	if p.Duplicate() {
		e.redeliveries = 1 // delivered before, by a previous connection or process
	}
	if id != "" {
		s.byID[id] = e
	}
	at, err := deliverAtOf(h)
	if err != nil {
		// Handed over at once as poison: the core dead-letters it with
		// this reason, never handles it, never drops it.
		e.malformed = fmt.Errorf("mqtt: message %s on %s: %w", id, s.spec.Topic, err)
	}
	if at.After(e.received) {
		e.state = stateWaiting
		s.mu.Unlock()
		s.hold(e, at)
		return true, nil
	}
	s.pushLocked(e)
	s.mu.Unlock()
	return true, nil
}

// pushLocked queues e for Receive. s.mu is held.
func (s *subscription) pushLocked(e *entry) {
	e.state = stateReady
	s.ready = append(s.ready, e)
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// hold hands e (stateWaiting) to the scheduler until at. After Stop the
// scheduler refuses it and e is dropped with the subscription: it was
// never acknowledged, so the broker redelivers it.
func (s *subscription) hold(e *entry, at time.Time) {
	_, _ = s.sched.At(at, func() { s.due(e) })
}

// due is the scheduler's callback: e's delay or backoff has passed.
func (s *subscription) due(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || e.state != stateWaiting {
		return
	}
	s.pushLocked(e)
}

// Receive returns up to max ready deliveries, blocking until there is one.
func (s *subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		max = 1
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if len(s.ready) == 0 && s.dead != nil {
			err := s.dead
			s.mu.Unlock()
			return nil, err
		}
		if n := min(max, len(s.ready)); n > 0 {
			out := make([]*ports.Delivery, n)
			for i, e := range s.ready[:n] {
				d := e.delivery(s.spec.Topic)
				e.state, e.out = stateOut, d
				out[i] = d
			}
			clear(s.ready[:n])
			s.ready = s.ready[n:]
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stopCh:
			return nil, ports.ErrClosed
		case <-s.deadCh:
		}
	}
}

// Session takeover detection. Another connection with the same client id
// takes the session over: the broker disconnects this one, with MQTT 5
// reason 0x8E ("Session taken over") where it sends one (mochi does;
// mosquitto 2.0 closes the socket without it). Without that reason, the
// tell-tale is a takeover war: both connections reconnect at once and
// take the session from each other, so the broker keeps closing a
// connection it has just accepted. takeoverQuick such closes in a row,
// each within takeoverWindow of the connection coming up and with no
// failed connection attempt in between (a broker that restarts or a
// network that is down refuses attempts), count as a takeover.
const (
	takeoverQuick  = 5
	takeoverWindow = 2 * time.Second
)

// onConnectError runs when a connection attempt failed.
func (s *subscription) onConnectError() {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
}

// onLost runs on paho's goroutine when the connection ended (see
// ackSession.onLost): dp is the broker's DISCONNECT, or nil. A takeover
// (see takeoverQuick) is reported and logged once; the connection is then
// not re-established (takenOver keeps it down: reconnecting would take
// the session back, and the two instances would take it from each other
// for ever), and Receive fails once the ready queue is empty.
func (s *subscription) onLost(dp *packets.Disconnect) {
	s.mu.Lock()
	if dp == nil && !s.isLost {
		close(s.lost)
		s.isLost = true
	}
	if s.closed || s.dead != nil {
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
		if !s.upAt.IsZero() && time.Since(s.upAt) < takeoverWindow && !s.failed {
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
	s.mu.Unlock()
	s.takeOver(reason)
}

// takeOver marks the session as taken over, once: it logs and reports a
// *SessionTakenOverError and wakes Receive.
func (s *subscription) takeOver(reason string) {
	err := &SessionTakenOverError{Instance: s.instance, ClientID: s.clientID, Reason: reason}
	s.mu.Lock()
	first := s.dead == nil
	if first {
		s.dead = err
		close(s.deadCh)
	}
	s.mu.Unlock()
	if !first {
		return
	}
	s.a.opts.Logger.Error("sluice mqtt: session taken over: two running instances share one Instance; this subscription stopped receiving",
		"instance", s.instance, "client", s.clientID, "topic", string(s.spec.Topic), "error", err)
	s.errs.Report(err)
}

// takenOver reports whether the session was taken over (see onLost).
func (s *subscription) takenOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead != nil
}

// onUp runs on autopaho's goroutine when a connection came up; it must not
// block. After a reconnect without the session, it subscribes again.
func (s *subscription) onUp(ca *paho.Connack) {
	s.mu.Lock()
	s.ups++
	s.upAt, s.failed = time.Now(), false
	if s.isLost {
		s.lost, s.isLost = make(chan struct{}), false
	}
	reconnect := s.ups > 1
	for id, e := range s.byID {
		// A PUBACK owed since before the previous connection will not be
		// needed: the broker redelivers right after CONNACK or never.
		if e.state == stateAckOwed && e.owedAt < s.ups-1 {
			delete(s.byID, id)
		}
	}
	// Subscribe again after every reconnect, with or without a session
	// (see Subscribe on mosquitto's persisted shared subscriptions).
	resubscribe := reconnect && !s.closed
	if resubscribe {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if !reconnect {
		s.first <- ca.SessionPresent
		return
	}
	s.a.opts.Logger.Info("sluice mqtt: reconnected", "client", s.clientID, "session_present", ca.SessionPresent)
	if !ca.SessionPresent {
		s.errs.Report(&ConnectionError{ClientID: s.clientID, Op: "reconnect", Err: ErrSessionLost})
	}
	if !resubscribe {
		return
	}
	go func() {
		defer s.wg.Done()
		// A reconnect can come before connect returned the manager (the
		// first connection was lost at once, e.g. in a takeover war).
		<-s.cmSet
		if s.cm == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.a.opts.ConnectTimeout)
		defer cancel()
		if err := s.subscribe(ctx, ca.SessionPresent); err != nil {
			s.errs.Report(&ConnectionError{ClientID: s.clientID, Op: "resubscribe", Err: err})
		}
	}()
}

// disconnectPacket is the DISCONNECT sent by Stop: a Broadcast instance
// without InstanceTTL ends its session (session expiry 0); every other
// subscription keeps it for a restart with the same instance.
func (s *subscription) disconnectPacket() *paho.Disconnect {
	if s.endOnStop {
		zero := uint32(0)
		return &paho.Disconnect{ReasonCode: 0, Properties: &paho.DisconnectProperties{SessionExpiryInterval: &zero}}
	}
	return &paho.Disconnect{ReasonCode: 0}
}

// barrier makes one request/response round trip (UNSUBSCRIBE of a filter
// the session never subscribed) so that the broker has read every PUBACK
// written before it. Without it, closing the socket right after the
// DISCONNECT can reset the connection while the broker still has unread
// PUBACKs in its buffer, and they are lost (measured with mosquitto: the
// last PUBACK of a burst sometimes was). It is skipped when no PUBACK was
// written, and bounded by ctx and 2s (a connection that died unnoticed
// costs Stop that long).
func (s *subscription) barrier(ctx context.Context) {
	if !s.sess.takeWrote() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _ = s.cm.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{s.a.opts.Namespace + "/sluice-barrier"}})
}

// Flush completes the deferred acknowledgements: it waits until every
// PUBACK released by Settle so far is written to the connection, then makes
// one request/response round trip so that the broker has read them (see
// barrier). PUBACKs held back behind an unsettled delivery of the same
// connection stay held (MQTT acknowledges in order). It returns ctx.Err()
// when ctx is done first and nil after Stop (Stop flushed).
func (s *subscription) Flush(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}
	if err := s.sess.flush(ctx); err != nil {
		return fmt.Errorf("mqtt: flush PUBACKs of %s: %w", s.clientID, err)
	}
	s.barrier(ctx)
	return ctx.Err()
}

var _ ports.Flusher = (*subscription)(nil)

// Errors reports connection events and deferred problems; closed by Stop.
func (s *subscription) Errors() <-chan error { return s.errs.C() }

// Stop stops receiving and disconnects without acknowledging anything that
// was not settled: the broker keeps those messages in the session (for a
// restart with the same instance) or, for a Broadcast instance without
// InstanceTTL, drops them with the session. Idempotent.
func (s *subscription) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.ready = nil
		s.mu.Unlock()
		close(s.stopCh)
		s.sched.Stop()
		s.barrier(ctx)
		if s.spec.Mode == ports.LoadBalance && s.a.opts.LeaveGroupOnStop {
			if _, err := s.cm.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{s.filter}}); err != nil {
				s.errs.Report(fmt.Errorf("mqtt: leave group %s: %w", s.filter, err))
			}
		}
		s.stopErr = s.cm.Disconnect(ctx)
		s.wg.Wait()
		s.a.forget(s)
		s.errs.Close()
		close(s.stopDone)
	})
	select {
	case <-s.stopDone:
		return s.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
