package mqtt

import (
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
)

// ackSession is paho's session state with paho's Ack ignored: a PUBACK is
// written by the SendAcks caller, in arrival order [MQTT-4.6.0-2], in its
// 4-byte form [MQTT-3.4.2.1]. A ticket of one connection (generation)
// never acknowledges a packet id the broker reused on the next.
type ackSession struct {
	session.SessionManager
	// onLost is called on paho's goroutine when a connection ends (with the
	// broker's DISCONNECT if any, then nil), before autopaho reconnects.
	onLost func(*packets.Disconnect)

	mu      sync.Mutex
	gen     uint64     // bumped at every ConAckReceived and ConnectionLost
	conn    io.Writer  // this generation's connection; nil while down
	order   []*ackSlot // QoS 1 deliveries of this generation in arrival order, unacknowledged or held back
	writing bool       // a caller of releaseAll is writing
	buf     []byte     // the writer's PUBACKs, reused
	wrote   bool       // a PUBACK was written since the last takeWrote
}

type ackSlot struct {
	id       uint16
	released bool
}

// ackTicket is one QoS 1 delivery of one generation; zero for QoS 0.
type ackTicket struct {
	gen  uint64
	slot *ackSlot
}

func newAckSession(inner session.SessionManager) *ackSession {
	return &ackSession{SessionManager: inner}
}

// arrived records a QoS 1 PUBLISH in arrival order (paho's callback).
func (s *ackSession) arrived(packetID uint16, qos byte) ackTicket {
	if qos == 0 {
		return ackTicket{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &ackSlot{id: packetID}
	s.order = append(s.order, slot)
	return ackTicket{gen: s.gen, slot: slot}
}

// releaseAll marks ts acknowledged and writes every PUBACK now in order
// (one behind an unreleased delivery waits); gone[i] is set for a ticket
// whose connection is closed. One caller writes, outside the lock; another
// leaves its PUBACKs to it, so paho's callback never waits for the socket.
// The error is this call's write error (the broker redelivers).
func (s *ackSession) releaseAll(ts []ackTicket, gone []bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range ts {
		switch {
		case t.slot == nil:
		case t.gen != s.gen || s.conn == nil:
			gone[i] = true
		default:
			t.slot.released = true
		}
	}
	if s.writing {
		return nil
	}
	s.writing = true
	defer func() { s.writing = false }()
	for {
		buf, n := s.buf[:0], 0
		for _, slot := range s.order {
			if !slot.released {
				break
			}
			buf = append(buf, 0x40, 0x02, byte(slot.id>>8), byte(slot.id))
			n++
		}
		clear(s.order[:n])
		s.order = s.order[n:]
		w := s.conn
		if n == 0 || w == nil {
			return nil
		}
		s.wrote = true
		s.mu.Unlock()
		_, err := w.Write(buf)
		s.mu.Lock()
		s.buf = buf
		if err != nil {
			return err
		}
	}
}

// takeWrote reports whether a PUBACK was written since the last call.
func (s *ackSession) takeWrote() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wrote
	s.wrote = false
	return w
}

func (s *ackSession) newGeneration(conn io.Writer) {
	s.mu.Lock()
	s.gen++
	s.conn = conn
	clear(s.order)
	s.order = s.order[:0]
	s.mu.Unlock()
}

// ConAckReceived starts a new generation on conn.
func (s *ackSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	s.newGeneration(conn)
	return s.SessionManager.ConAckReceived(conn, cp, ca)
}

// ConnectionLost ends the generation.
func (s *ackSession) ConnectionLost(dp *packets.Disconnect) error {
	s.newGeneration(nil)
	if s.onLost != nil {
		s.onLost(dp)
	}
	return s.SessionManager.ConnectionLost(dp)
}

// Ack is paho's automatic acknowledgement: ignored (see releaseAll).
func (s *ackSession) Ack(*packets.Publish) error { return nil }
