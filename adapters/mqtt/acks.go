package mqtt

import (
	"context"
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	paholog "github.com/eclipse/paho.golang/paho/log"
	"github.com/eclipse/paho.golang/paho/session"
)

// ackSession is the paho session manager of a subscription connection. It
// delegates to paho's in-memory session state and replaces one thing:
// acknowledgement. paho runs with automatic acknowledgement and calls Ack
// right after the receive handlers returned; ackSession ignores that call
// and writes a PUBACK only when SendAcks releases the delivery, in the
// order the PUBLISHes arrived on the connection [MQTT-4.6.0-2], with no
// goroutine of its own.
//
// Every connection is a generation: a ticket from one generation can never
// acknowledge a packet of the next, where the broker may have reused the
// packet identifier. PUBACKs are written straight to the connection in
// their 4-byte form (reason code 0x00, no properties [MQTT-3.4.2.1]).
type ackSession struct {
	inner session.SessionManager
	// onLost, when set, is called when a connection ends — with the
	// broker's DISCONNECT if it sent one, then with nil as paho shuts the
	// connection down — on paho's goroutine, before autopaho decides to
	// reconnect; it must not block.
	onLost func(*packets.Disconnect)

	wmu sync.Mutex // held while releasing and writing: PUBACKs leave in order
	buf []byte     // the PUBACKs of one write, reused under wmu

	mu    sync.Mutex
	gen   uint64     // bumped at every ConAckReceived and ConnectionLost
	conn  io.Writer  // this generation's connection; nil while down
	order []*ackSlot // QoS 1 deliveries of this generation in arrival order, unacknowledged or held back
	wrote bool       // a PUBACK was written since the last takeWrote
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

func newAckSession(inner session.SessionManager) *ackSession { return &ackSession{inner: inner} }

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

// releaseAll marks the deliveries of ts acknowledged and writes, in one
// write, every PUBACK that is now in order. gone[i] is set for a ticket
// whose connection is closed. The error is the write's (the connection is
// breaking; the broker will redeliver). A PUBACK behind an earlier, still
// unacknowledged delivery of the same connection is held back until that
// one is released.
func (s *ackSession) releaseAll(ts []ackTicket, gone []bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	for i, t := range ts {
		switch {
		case t.slot == nil:
		case t.gen != s.gen || s.conn == nil:
			gone[i] = true
		default:
			t.slot.released = true
		}
	}
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
	s.wrote = s.wrote || n > 0
	s.mu.Unlock()
	s.buf = buf
	if n == 0 || w == nil {
		return nil
	}
	_, err := w.Write(buf)
	return err
}

// takeWrote reports whether a PUBACK was written since the last call.
func (s *ackSession) takeWrote() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wrote
	s.wrote = false
	return w
}

// heldBack reports how many acknowledged deliveries wait behind an
// unacknowledged one (for tests and diagnostics).
func (s *ackSession) heldBack() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, slot := range s.order {
		if slot.released {
			n++
		}
	}
	return n
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
	return s.inner.ConAckReceived(conn, cp, ca)
}

// ConnectionLost ends the generation: its deliveries can no longer be
// acknowledged.
func (s *ackSession) ConnectionLost(dp *packets.Disconnect) error {
	s.newGeneration(nil)
	if s.onLost != nil {
		s.onLost(dp)
	}
	return s.inner.ConnectionLost(dp)
}

// AddToSession delegates to paho's state.
func (s *ackSession) AddToSession(ctx context.Context, p session.Packet, resp chan<- packets.ControlPacket) error {
	return s.inner.AddToSession(ctx, p, resp)
}

// PacketReceived delegates to paho's state.
func (s *ackSession) PacketReceived(p *packets.ControlPacket, pubs chan<- *packets.Publish) error {
	return s.inner.PacketReceived(p, pubs)
}

// Ack is paho's automatic acknowledgement: ignored (see releaseAll).
func (s *ackSession) Ack(*packets.Publish) error { return nil }

// Close closes paho's state.
func (s *ackSession) Close() error { return s.inner.Close() }

// SetErrorLogger delegates to paho's state.
func (s *ackSession) SetErrorLogger(l paholog.Logger) { s.inner.SetErrorLogger(l) }

// SetDebugLogger delegates to paho's state.
func (s *ackSession) SetDebugLogger(l paholog.Logger) { s.inner.SetDebugLogger(l) }
