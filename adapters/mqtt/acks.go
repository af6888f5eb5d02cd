package mqtt

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/ports"
)

// ackSession is paho's session state with paho's Ack ignored: a PUBACK
// is written by SendAcks, in arrival order [MQTT-4.6.0-2], in its 4-byte
// form [MQTT-3.4.2.1]. A connection's deliveries are PUBACKed on it alone:
// a packet id the broker reuses on the next one is another delivery's.
type ackSession struct {
	session.SessionManager
	s *subscription
}

// Ack is paho's automatic acknowledgement: ignored.
func (ackSession) Ack(*packets.Publish) error { return nil }

func (a ackSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	a.s.connected(conn)
	return a.SessionManager.ConAckReceived(conn, cp, ca)
}

func (a ackSession) ConnectionLost(dp *packets.Disconnect) error {
	a.s.lost(dp)
	return a.SessionManager.ConnectionLost(dp)
}

// SendAcks releases the PUBACKs of handles with one write. A delivery
// whose connection closed owes its PUBACK to the DUP copy, acknowledged on
// arrival and not handed out: nil for it too.
func (s *subscription) SendAcks(_ context.Context, handles []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range handles {
		e := h.(*entry)
		e.acked, e.ackedOn = true, s.ups
	}
	s.flushLocked()
	return nil
}

// Abandon lets the broker redeliver the records of a failed settlement: it
// forgets each unacked one (its DUP copy is handed out again) and closes
// the connection, on which the PUBACKs behind them would wait as long as
// it lasts; once per connection, no sooner than recycleAfter after it came
// up, so that failed settlements neither storm nor look like a takeover.
func (s *subscription) Abandon(handles []any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := false
	for _, h := range handles {
		if e := h.(*entry); !e.acked {
			if s.byID[e.id] == e {
				delete(s.byID, e.id)
			}
			held = true
		}
	}
	if c, _ := s.w.(io.Closer); held && c != nil && !s.recycling {
		s.recycling = true
		n := s.ups
		time.AfterFunc(recycleAfter-time.Since(s.upAt), func() {
			s.mu.Lock()
			current := s.ups == n && s.w != nil && !s.closed
			s.dropping.Store(current) // its loss is no fault to report
			s.mu.Unlock()
			if current {
				_ = c.Close() // autopaho reconnects and the session resumes
			}
		})
	}
}

// recycleAfter is how long a connection lasts at least before Abandon closes
// it (a variable for tests): a later close does not count as a takeover.
var recycleAfter = takeoverWindow

// flushLocked writes the PUBACKs of the acked deliveries at the head of
// order; one behind an unacked delivery waits. One caller writes, without
// the lock; another leaves its PUBACKs to it, so paho's callback never
// waits for the socket. An entry whose PUBACK failed stays in byID for its
// DUP copy.
func (s *subscription) flushLocked() {
	for !s.writing && s.w != nil {
		n := 0
		for n < len(s.order) && s.order[n].acked {
			n++
		}
		if n == 0 {
			return
		}
		batch, w, buf := s.order[:n], s.w, s.buf[:0]
		s.order = s.order[n:]
		for _, e := range batch {
			buf = append(buf, 0x40, 0x02, byte(e.pub.PacketID>>8), byte(e.pub.PacketID))
		}
		s.writing, s.wrote = true, true
		s.mu.Unlock()
		_, err := w.Write(buf)
		s.mu.Lock()
		s.writing, s.buf = false, buf
		for i, e := range batch {
			if err == nil && s.byID[e.id] == e {
				delete(s.byID, e.id)
			}
			batch[i] = nil
		}
		if err != nil {
			return // the broker redelivers on the next connection
		}
	}
}

// connected starts connection number ups+1 on conn.
func (s *subscription) connected(conn io.Writer) {
	s.mu.Lock()
	s.ups++
	s.w, s.upAt, s.recycling = conn, time.Now(), false
	s.up, s.down = context.WithCancel(context.Background())
	for id, e := range s.byID {
		if e.acked && e.ackedOn < s.ups-1 { // the broker redelivers right after CONNACK or never
			delete(s.byID, id)
		}
	}
	s.mu.Unlock()
	s.failed.Store(false)
	s.dropping.Store(false)
}

// A session takeover shows as DISCONNECT 0x8E twice in a row (the embedded
// broker; once may be a stopped predecessor's late CONNECT, and a running
// instance takes the session back as this one does) or, without a reason
// (mosquitto 2.0), as a takeover war: takeoverQuick connections in a row
// closed within takeoverWindow of acceptance, no attempt failing between.
const (
	reasonSessionTakenOver = 0x8E
	takeoverQuick          = 5
	takeoverWindow         = 2 * time.Second
)

// lost ends the connection before autopaho reconnects (dp: the broker's
// DISCONNECT, then nil); a takeover is reported once and keeps it down.
func (s *subscription) lost(dp *packets.Disconnect) {
	s.mu.Lock()
	s.w = nil
	clear(s.order)
	s.order = s.order[:0]
	if s.down != nil {
		s.down()
	}
	var reason string
	switch {
	case s.dead.Err() != nil:
	case dp != nil && dp.ReasonCode == reasonSessionTakenOver:
		if time.Since(s.displaced) < takeoverWindow+2*s.c.opts.ReconnectBackoff {
			reason = "sent DISCONNECT reason 0x8E, session taken over, twice in a row"
		}
		s.displaced = time.Now()
	case dp == nil: // the call after a DISCONNECT counts that loss too
		if !s.upAt.IsZero() && time.Since(s.upAt) < takeoverWindow && !s.failed.Load() {
			s.quick++
		} else {
			s.quick = 0
		}
		s.upAt = time.Time{}
		if s.quick >= takeoverQuick {
			reason = fmt.Sprintf("closed %d connections in a row within %v of accepting them, without a DISCONNECT reason: another connection with the same client id keeps taking the session", s.quick, takeoverWindow)
		}
	}
	var taken error
	if reason != "" {
		taken = &SessionTakenOverError{Instance: s.instance, ClientID: s.clientID, Reason: reason}
		s.kill(taken)
	}
	s.mu.Unlock()
	if taken != nil {
		s.c.opts.Logger.Error("sluice mqtt: session taken over: two running instances share one Instance; this subscription stopped receiving",
			"instance", s.instance, "client", s.clientID, "topic", string(s.spec.Topic), "error", taken)
		s.Report(taken)
	}
}

// takenOver reports whether the session was taken over (or closed).
func (s *subscription) takenOver() bool { return s.dead.Err() != nil }

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
	return fmt.Sprintf("mqtt: the session of instance %q (client id %s) was taken over by another connection with the same client id: two running instances share the instance %q; this one stopped receiving — give each running instance its own Instance (the broker %s)",
		e.Instance, e.ClientID, e.Instance, e.Reason)
}

// Is matches ports.ErrInstanceShared.
func (e *SessionTakenOverError) Is(target error) bool { return target == ports.ErrInstanceShared }
