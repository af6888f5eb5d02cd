package embedded

import (
	"math"
	"strings"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// message is one application message as the broker keeps it: immutable
// once made, shared by every session it is routed to.
type message struct {
	topic   string
	payload []byte
	props   packets.Properties // as published, without expiry, topic alias and subscription id
	qos     byte
	expires time.Time // zero: never
	size    int       // the PUBLISH's size at its largest; 0 until computed (under Broker.mu)
}

// newMessage keeps p, received at now.
func newMessage(p *packets.Publish, now time.Time) *message {
	m := &message{topic: p.Topic, payload: p.Payload, qos: p.QoS}
	if p.Properties != nil {
		m.props = *p.Properties
	}
	if e := m.props.MessageExpiry; e != nil {
		m.expires = now.Add(time.Duration(*e) * time.Second)
	}
	m.props.MessageExpiry, m.props.TopicAlias, m.props.SubscriptionIdentifier = nil, nil, nil
	return m
}

// remaining is the Message Expiry Interval to send at now, rounded up to
// whole seconds (0: m has none); ok is false once m has expired.
func (m *message) remaining(now time.Time) (seconds uint32, ok bool) {
	if m.expires.IsZero() {
		return 0, true
	}
	left := m.expires.Sub(now)
	if left <= 0 {
		return 0, false
	}
	return uint32(min((left+time.Second-1)/time.Second, math.MaxUint32)), true
}

// packetSize is the size of m's PUBLISH at its largest (packet id and
// expiry included), for a client's Maximum Packet Size. Under Broker.mu.
func (m *message) packetSize() int {
	if m.size == 0 {
		props := len(m.props.Pack(packets.PUBLISH)) + 5
		body := 2 + len(m.topic) + 2 + 4 + props + len(m.payload)
		m.size = 1 + 4 + body
	}
	return m.size
}

// delivery is one message on its way to one session.
type delivery struct {
	m     *message
	qos   byte   // min(published, subscribed)
	group *group // the shared subscription it was given by, or nil
	id    uint16 // packet id (QoS 1), once sent
	acked bool   // acknowledged or dropped: no longer in flight
	// sent: sent on the session's current connection.
	sent bool
	// orphan: handed to another member of its group while sent on the
	// current connection; its packet id stays taken until the PUBACK or
	// the connection's end.
	orphan bool
}

// sub is one subscription of a session.
type sub struct {
	filter  string // as subscribed, "$share/<name>/" included
	share   string // share name, "" for a plain subscription
	qos     byte   // granted
	noLocal bool
	node    *node
	group   *group
}

// group is a shared subscription: a share name and a filter, and the
// sessions subscribed to it.
type group struct {
	name    string
	node    *node
	members []*session // in subscription order, for round-robin
	subs    map[*session]*sub
	next    int // where the next round-robin turn starts
}

// pick chooses the member a message goes to: the next in turn among those
// connected with room under their Receive Maximum; else among those
// connected; else among all (the message waits in its session).
func (g *group) pick() *session {
	n := len(g.members)
	for pass := range 3 {
		for i := range n {
			s := g.members[(g.next+i)%n]
			if (pass == 0 && s.hasRoom()) || (pass == 1 && s.conn != nil) || pass == 2 {
				g.next = (g.next + i + 1) % n
				return s
			}
		}
	}
	return nil
}

func (g *group) remove(s *session) {
	delete(g.subs, s)
	for i, m := range g.members {
		if m == s {
			g.members = append(g.members[:i], g.members[i+1:]...)
			if g.next > i {
				g.next--
			}
			break
		}
	}
	if len(g.members) > 0 {
		g.next %= len(g.members)
	} else {
		g.next = 0
	}
}

// will is a connection's will message.
type will struct {
	p     *packets.Publish
	delay time.Duration
}

// session is the state the broker keeps for one client id, connected or
// not. Every field is guarded by Broker.mu.
type session struct {
	id     string
	conn   *conn  // the current connection; nil while disconnected
	expiry uint32 // the session expiry interval, seconds
	ended  bool

	expiryGen   uint64 // bumped to disarm a pending expiry timer
	expiryTimer *time.Timer
	will        *will // a will waiting out its delay
	willTimer   *time.Timer

	subs map[string]*sub // by filter as subscribed

	queue       []*delivery          // not sent yet, in order; unbounded
	inflight    []*delivery          // QoS 1 sent and not acknowledged, in send order (acked ones dropped lazily)
	live        int                  // entries of inflight not acked
	byID        map[uint16]*delivery // inflight by packet id
	nextID      uint16
	resend      []*delivery // inflight to send again (DUP) on the current connection, in order
	outstanding int         // QoS 1 deliveries sent on the current connection and not acknowledged
}

func newSession(id string) *session {
	return &session{id: id, subs: map[string]*sub{}, byID: map[uint16]*delivery{}}
}

// hasRoom: connected, with fewer messages waiting or in flight than its
// connection's Receive Maximum.
func (s *session) hasRoom() bool {
	return s.conn != nil && s.outstanding+len(s.resend)+len(s.queue) < s.conn.receiveMax
}

// newPacketID returns a packet id no in-flight delivery of s holds.
func (s *session) newPacketID() uint16 {
	for {
		s.nextID++
		if s.nextID != 0 && s.byID[s.nextID] == nil {
			return s.nextID
		}
	}
}

// removeInflight drops d from the in-flight deliveries.
func (s *session) removeInflight(d *delivery) {
	if d.acked {
		return
	}
	d.acked = true
	delete(s.byID, d.id)
	s.live--
	i := 0
	for i < len(s.inflight) && s.inflight[i].acked {
		i++
	}
	if i > 0 {
		clear(s.inflight[:i])
		s.inflight = s.inflight[i:]
	}
	if len(s.inflight) > 64 && len(s.inflight) > 2*s.live {
		live := make([]*delivery, 0, s.live)
		for _, d := range s.inflight {
			if !d.acked {
				live = append(live, d)
			}
		}
		s.inflight = live
	}
}

// attached starts connection c on s: what was in flight is sent again,
// in order, before anything queued; orphans are released.
func (s *session) attached(c *conn) {
	s.conn, s.outstanding = c, 0
	s.resend = s.resend[:0]
	for _, d := range s.inflight {
		d.sent = false
		if d.acked {
			continue
		}
		if d.orphan {
			s.removeInflight(d)
			continue
		}
		s.resend = append(s.resend, d)
	}
}

// detached ends the current connection of s: QoS 0 messages are not kept
// for a disconnected session.
func (s *session) detached() {
	s.conn, s.outstanding = nil, 0
	clear(s.resend)
	s.resend = s.resend[:0]
	for _, d := range s.inflight {
		d.sent = false
		if d.orphan {
			s.removeInflight(d)
		}
	}
	kept := s.queue[:0]
	for _, d := range s.queue {
		if d.qos > 0 {
			kept = append(kept, d)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// stopTimers disarms the expiry and will timers of s.
func (s *session) stopTimers() {
	s.expiryGen++
	if s.expiryTimer != nil {
		s.expiryTimer.Stop()
		s.expiryTimer = nil
	}
	if s.willTimer != nil {
		s.willTimer.Stop()
		s.willTimer = nil
	}
}

// enqueueLocked queues m for s at qos, given by shared subscription g (or
// nil), and wakes its connection's writer.
func (b *Broker) enqueueLocked(s *session, m *message, qos byte, g *group) {
	if s.conn == nil && qos == 0 {
		return // QoS 0 is not kept for a disconnected session
	}
	s.queue = append(s.queue, &delivery{m: m, qos: qos, group: g})
	if s.conn != nil {
		s.conn.wakeLocked()
	}
}

// routeLocked queues m for every session with a matching subscription
// (one copy per session, at the highest QoS of its matching plain
// subscriptions; No Local honoured against from) and for one member of
// every matching shared subscription. It returns how many it was queued
// for.
func (b *Broker) routeLocked(m *message, from *session) int {
	plain, groups := b.plainScratch, b.groupScratch[:0]
	b.root.match(strings.Split(m.topic, "/"), func(n *node) {
		for s, sb := range n.plain {
			if sb.noLocal && s == from {
				continue
			}
			q := min(sb.qos, m.qos)
			if cur, ok := plain[s]; !ok || q > cur {
				plain[s] = q
			}
		}
		for _, g := range n.groups {
			groups = append(groups, g)
		}
	})
	targets := len(plain) + len(groups)
	for s, q := range plain {
		b.enqueueLocked(s, m, q, nil)
	}
	clear(plain)
	for i, g := range groups {
		b.shareLocked(g, m)
		groups[i] = nil
	}
	b.groupScratch = groups[:0]
	return targets
}

// shareLocked gives m to one member of g.
func (b *Broker) shareLocked(g *group, m *message) {
	if s := g.pick(); s != nil {
		b.enqueueLocked(s, m, min(g.subs[s].qos, m.qos), g)
	}
}

// subscribeLocked adds (or replaces) a subscription of s.
func (b *Broker) subscribeLocked(s *session, so packets.SubOptions) {
	qos := min(so.QoS, 1)
	if sb := s.subs[so.Topic]; sb != nil {
		sb.qos, sb.noLocal = qos, so.NoLocal
		return
	}
	share, filter, _ := splitShare(so.Topic)
	n := b.root.insert(filter)
	sb := &sub{filter: so.Topic, share: share, qos: qos, noLocal: so.NoLocal, node: n}
	if share == "" {
		n.plain[s] = sb
	} else {
		g := n.groups[share]
		if g == nil {
			g = &group{name: share, node: n, subs: map[*session]*sub{}}
			n.groups[share] = g
		}
		g.members = append(g.members, s)
		g.subs[s] = sb
		sb.group = g
	}
	s.subs[so.Topic] = sb
}

// unsubscribeLocked removes the subscription of s to filter (as
// subscribed) and reports whether there was one. Leaving a shared
// subscription hands what s holds of it to the remaining members.
func (b *Broker) unsubscribeLocked(s *session, filter string) bool {
	sb := s.subs[filter]
	if sb == nil {
		return false
	}
	delete(s.subs, filter)
	if g := sb.group; g != nil {
		g.remove(s)
		b.handOverLocked(s, g)
		if len(g.members) == 0 {
			delete(sb.node.groups, g.name)
		}
	} else {
		delete(sb.node.plain, s)
	}
	sb.node.prune()
	return true
}

// handOverLocked gives what s holds of shared subscription g — in flight
// first, then queued, in order — to the members g has left; with none
// left it is dropped. A delivery s has on its current connection keeps its
// packet id until the client acknowledges it (an orphan).
func (b *Broker) handOverLocked(s *session, g *group) {
	var moved []*message
	for _, d := range s.inflight {
		if d.acked || d.orphan || d.group != g {
			continue
		}
		moved = append(moved, d.m)
		if d.sent {
			d.orphan = true
		} else {
			s.removeInflight(d) // its resend, if pending, is skipped
		}
	}
	kept := s.queue[:0]
	for _, d := range s.queue {
		if d.group == g {
			moved = append(moved, d.m)
		} else {
			kept = append(kept, d)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if len(g.members) == 0 {
		return
	}
	for _, m := range moved {
		b.shareLocked(g, m)
	}
}

// endSessionLocked ends s: its will (if waiting out its delay) is
// published, its shared messages are handed to the other members, the
// rest is dropped.
func (b *Broker) endSessionLocked(s *session) {
	if s.ended {
		return
	}
	s.ended = true
	s.stopTimers()
	if w := s.will; w != nil {
		s.will = nil
		b.publishWillLocked(s, w)
	}
	for filter := range s.subs {
		b.unsubscribeLocked(s, filter)
	}
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
	clear(s.queue)
	s.queue, s.inflight, s.resend, s.byID = nil, nil, nil, nil
	if b.testSessionEnded != nil {
		b.testSessionEnded(s.id)
	}
}

// expireLaterLocked arms the expiry of disconnected session s (or ends it
// now, for an expiry interval of 0).
func (b *Broker) expireLaterLocked(s *session) {
	switch s.expiry {
	case 0:
		b.endSessionLocked(s)
	case math.MaxUint32: // never expires
	default:
		s.expiryGen++
		gen := s.expiryGen
		s.expiryTimer = time.AfterFunc(time.Duration(s.expiry)*time.Second, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if !b.closed && s.expiryGen == gen && s.conn == nil {
				b.endSessionLocked(s)
			}
		})
	}
}

// willLocked publishes w, the will of the connection s lost, now or after
// its delay (unless the session is resumed or ends first).
func (b *Broker) willLocked(s *session, w *will) {
	if w.delay <= 0 {
		b.publishWillLocked(s, w)
		return
	}
	if s.willTimer != nil {
		s.willTimer.Stop()
	}
	s.will = w
	s.willTimer = time.AfterFunc(w.delay, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.closed && s.will == w {
			s.will = nil
			b.publishWillLocked(s, w)
		}
	})
}

func (b *Broker) publishWillLocked(s *session, w *will) {
	if !b.closed {
		b.routeLocked(newMessage(w.p, b.now()), s)
	}
}
