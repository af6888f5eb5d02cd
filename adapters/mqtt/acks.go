package mqtt

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	paholog "github.com/eclipse/paho.golang/paho/log"
	"github.com/eclipse/paho.golang/paho/session"
)

// errConnectionGone: the connection that received a delivery is closed, so
// its PUBACK can no longer be sent (the broker redelivers the message on
// the next connection).
var errConnectionGone = errors.New("the connection that received this delivery is closed")

// ackSession is the paho session manager of a subscription connection. It
// delegates to paho's in-memory session state and replaces one thing:
// acknowledgement. paho runs with automatic acknowledgement and calls Ack
// right after the receive handlers returned; ackSession ignores that call
// and writes a PUBACK only when the adapter releases the delivery, in the
// order the PUBLISHes arrived on the connection [MQTT-4.6.0-2].
//
// Every connection is a generation: a ticket from one generation can never
// acknowledge a packet of the next, where the broker may have reused the
// packet identifier.
//
// PUBACKs are written straight to the connection in their 4-byte form
// (reason code 0x00, no properties [MQTT-3.4.2.1]). One settler at a time
// writes; PUBACKs released while it writes are appended to its buffer and
// go out in its next write, so the receive path never waits for a write
// and a burst of settlements costs one system call.
type ackSession struct {
	inner session.SessionManager
	// onLost, when set, is called when a connection ends — with the
	// broker's DISCONNECT if it sent one, then with nil as paho shuts the
	// connection down — on paho's goroutine, before autopaho decides to
	// reconnect; it must not block.
	onLost func(*packets.Disconnect)

	mu      sync.Mutex
	gen     uint64        // bumped at every ConAckReceived and ConnectionLost
	conn    io.Writer     // this generation's connection; nil while down
	order   []*ackSlot    // QoS 1 deliveries of this generation in arrival order, unacknowledged or held back
	pending []byte        // encoded PUBACKs in order, not yet written
	spare   []byte        // the writer's previous buffer, reused
	writing bool          // a settler is writing pending
	idle    chan struct{} // closed and replaced when a writer finishes, if flushers wait
	wrote   bool          // a PUBACK was written since the last takeWrote
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

// release marks t's delivery acknowledged and queues every PUBACK that is
// now in order. It returns errConnectionGone when t's connection is
// closed, and the write error when this call wrote and the write failed
// (the connection is breaking; the broker will redeliver). A nil error
// means the PUBACK was written, or handed to the settler writing now, or
// is held back behind an earlier, still unacknowledged delivery of the
// same connection.
func (s *ackSession) release(t ackTicket) error {
	var gone [1]bool
	err := s.releaseAll([]ackTicket{t}, gone[:])
	if gone[0] {
		return errConnectionGone
	}
	return err
}

// releaseAll releases every ticket of ts under one lock and writes the
// PUBACKs now in order with one write. gone[i] is set for a ticket whose
// connection is closed. The error is the write error, as for release.
func (s *ackSession) releaseAll(ts []ackTicket, gone []bool) error {
	s.mu.Lock()
	live := false
	for i, t := range ts {
		if t.slot == nil {
			continue
		}
		if t.gen != s.gen || s.conn == nil {
			gone[i] = true
			continue
		}
		t.slot.released = true
		live = true
	}
	if !live {
		s.mu.Unlock()
		return nil
	}
	n := 0
	for _, slot := range s.order {
		if !slot.released {
			break
		}
		s.pending = append(s.pending, 0x40, 0x02, byte(slot.id>>8), byte(slot.id))
		n++
	}
	if n > 0 {
		clear(s.order[:n])
		s.order = s.order[n:]
	}
	if s.writing || len(s.pending) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.writing = true
	var err error
	for len(s.pending) > 0 && s.conn != nil {
		buf, w, gen := s.pending, s.conn, s.gen
		s.pending = s.spare[:0]
		s.mu.Unlock()
		_, werr := w.Write(buf)
		s.mu.Lock()
		s.wrote = true
		s.spare = buf[:0]
		if werr != nil && gen == s.gen {
			// The connection is breaking: what is pending dies with it
			// and the broker redelivers.
			s.pending = s.pending[:0]
			err = werr
			break
		}
		// A changed generation cleared pending; anything in it now was
		// released on the new connection and is written there.
	}
	s.writing = false
	if s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	return err
}

// flush waits until no PUBACK released so far is still waiting to be
// written (a settler writing now finishes its buffer), or ctx is done.
// PUBACKs held back behind an unacknowledged delivery stay held: MQTT
// acknowledges in order, and that delivery is not settled.
func (s *ackSession) flush(ctx context.Context) error {
	for {
		s.mu.Lock()
		if !s.writing || s.conn == nil {
			s.mu.Unlock()
			return nil
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle := s.idle
		s.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
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
	s.pending = s.pending[:0]
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

// Ack is paho's automatic acknowledgement: ignored (see release).
func (s *ackSession) Ack(*packets.Publish) error { return nil }

// Close closes paho's state.
func (s *ackSession) Close() error { return s.inner.Close() }

// SetErrorLogger delegates to paho's state.
func (s *ackSession) SetErrorLogger(l paholog.Logger) { s.inner.SetErrorLogger(l) }

// SetDebugLogger delegates to paho's state.
func (s *ackSession) SetDebugLogger(l paholog.Logger) { s.inner.SetDebugLogger(l) }
