package pulsartest

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// conn is one client connection. Its read loop handles commands one at a
// time under the broker lock; everything the broker sends to it goes through
// an ordered outbound queue drained by its write loop, so no handler ever
// blocks on the network.
type conn struct {
	b    *Broker
	nc   net.Conn
	wake chan struct{} // cap 1: the outbound queue has frames
	done chan struct{} // closed by shutdown

	// Guarded by b.mu.
	connected bool
	dead      bool
	producers map[uint64]*producer
	consumers map[uint64]*consumer

	qmu sync.Mutex // leaf lock: only the outbound queue
	q   []outFrame
}

// outFrame is one encoded frame waiting to be written; it is not written
// before notBefore (a delayed send receipt), and frames behind it wait too.
type outFrame struct {
	data      []byte
	notBefore time.Time
}

func newConn(b *Broker, nc net.Conn) *conn {
	return &conn{
		b:         b,
		nc:        nc,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		producers: map[uint64]*producer{},
		consumers: map[uint64]*consumer{},
	}
}

// enqueue queues a frame for writing. Safe with or without b.mu held.
func (c *conn) enqueue(data []byte, notBefore time.Time) {
	c.qmu.Lock()
	c.q = append(c.q, outFrame{data: data, notBefore: notBefore})
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// reply queues a simple command frame.
func (c *conn) reply(cmd []byte) { c.enqueue(appendFrame(nil, cmd, nil), time.Time{}) }

func (c *conn) writeLoop() {
	defer c.b.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.qmu.Lock()
		batch := c.q
		c.q = nil
		c.qmu.Unlock()
		for len(batch) > 0 {
			// Write every frame up to the first one that must wait.
			n := 0
			now := time.Now()
			var buf net.Buffers
			for n < len(batch) && !batch[n].notBefore.After(now) {
				buf = append(buf, batch[n].data)
				n++
			}
			if len(buf) > 0 {
				if _, err := buf.WriteTo(c.nc); err != nil {
					c.shutdown("write: " + err.Error())
					return
				}
			}
			batch = batch[n:]
			if len(batch) == 0 {
				break
			}
			wait := time.Until(batch[0].notBefore)
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
				// Frames held behind it now go out in order.
				batch[0].notBefore = time.Time{}
			case <-c.done:
				return
			}
		}
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
	}
}

func (c *conn) readLoop(r *bufio.Reader) {
	defer c.b.wg.Done()
	maxFrame := uint32(c.b.cfg.maxMessageSize) + framePadding
	for {
		cmd, payload, err := readFrame(r, maxFrame)
		if err != nil {
			c.shutdown("read: " + err.Error())
			return
		}
		bc, err := decodeBase(cmd)
		if err != nil {
			c.shutdown("undecodable command: " + err.Error())
			return
		}
		if err := c.handle(bc, payload); err != nil {
			c.shutdown("protocol error: " + err.Error())
			return
		}
	}
}

// shutdown closes the connection once: it drops the connection's producers
// and consumers (making their unacknowledged messages available again),
// stops the write loop and closes the socket.
func (c *conn) shutdown(reason string) {
	b := c.b
	b.mu.Lock()
	if c.dead {
		b.mu.Unlock()
		return
	}
	c.dead = true
	delete(b.conns, c)
	for _, p := range c.producers {
		p.topic.removeProducer(p)
	}
	for _, cs := range c.consumers {
		cs.sub.removeConsumer(cs)
	}
	c.producers, c.consumers = nil, nil
	b.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
	b.logf("%s: connection closed: %s", c.nc.RemoteAddr(), reason)
}
