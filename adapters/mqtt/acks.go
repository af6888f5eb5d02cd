package mqtt

import (
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
)

// ackSession is the paho session manager of a subscription connection:
// paho's state, but paho's automatic Ack is ignored and a PUBACK is
// written only when SendAcks releases the delivery, in the order the
// PUBLISHes arrived [MQTT-4.6.0-2], by the caller (no goroutine). Each
// connection is a generation: a ticket of one never acknowledges a packet
// of the next, where the broker may reuse the packet id. A PUBACK is
// written in its 4-byte form (reason 0x00, no properties [MQTT-3.4.2.1]).
type ackSession struct {
	session.SessionManager // paho's in-memory state, for everything but acknowledgement
	// onLost, when set, is called when a connection ends — with the
	// broker's DISCONNECT if it sent one, then with nil — on paho's
	// goroutine, before autopaho decides to reconnect; it must not block.
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

// ackTicket identifies one QoS 1 delivery on one connection generation. The
// zero ticket (QoS 0) needs no acknowledgement.
type ackTicket struct {
	gen  uint64
	slot *ackSlot
}

func newAckSession(inner session.SessionManager) *ackSession {
	return &ackSession{SessionManager: inner}
}

// arrived records a QoS 1 PUBLISH in arrival order; the paho receive
// handler calls it, in the order paho read the packets.
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

// releaseAll marks the deliveries of ts acknowledged and writes every
// PUBACK that is now in order. gone[i] is set for a ticket whose
// connection is closed. One caller writes at a time, outside the lock; a
// caller that finds a write under way leaves its PUBACKs to that writer,
// which writes again before it returns, so paho's receive callback (a
// redelivered copy acknowledged on arrival) never waits for the socket.
// The error is this call's write error (the connection is breaking; the
// broker redelivers). A PUBACK behind an earlier, still unacknowledged
// delivery of the connection is held back until that one is released.
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

// ConAckReceived starts a new generation on conn, then lets paho's state
// resume.
func (s *ackSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	s.newGeneration(conn)
	return s.SessionManager.ConAckReceived(conn, cp, ca)
}

// ConnectionLost ends the generation: its deliveries can no longer be
// acknowledged.
func (s *ackSession) ConnectionLost(dp *packets.Disconnect) error {
	s.newGeneration(nil)
	if s.onLost != nil {
		s.onLost(dp)
	}
	return s.SessionManager.ConnectionLost(dp)
}

// Ack is paho's automatic acknowledgement: ignored (see releaseAll).
func (s *ackSession) Ack(*packets.Publish) error { return nil }
