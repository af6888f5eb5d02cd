package amqp

import (
	"errors"
	"net"
	"sync"
)

// coalescingConn batches the client library's writes into fewer system
// calls. amqp091-go flushes its buffer after every publish and every ack,
// one write(2) each; under load that is most of the client's CPU, and the
// broker reads as many small TCP segments. Here Write appends to a buffer
// and one writer goroutine sends whatever accumulated in a single write:
// idle, a frame goes out at once (one goroutine wake-up later); busy,
// dozens of frames share a write.
//
// Order is kept (one buffer, one writer). Write blocks while more than
// highWater bytes are unsent (backpressure, as a blocking socket would).
// A failed socket write closes the socket, so the library's reader fails
// and the connection shuts down as it would have on its own write error;
// every later Write returns the error. Nothing that needs a broker reply
// depends on a write having reached the socket: publishes wait for
// confirms, and an ack has no reply either way.
type coalescingConn struct {
	net.Conn

	mu    sync.Mutex
	cond  sync.Cond // signalled when the buffer drained or failed
	buf   []byte
	err   error
	shut  bool
	wake  chan struct{}
	done  chan struct{}
	spare []byte
}

const highWater = 1 << 20

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cc.cond.L = &cc.mu
	go cc.run()
	return cc
}

// Write queues p for the writer goroutine.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for c.err == nil && !c.shut && len(c.buf) >= highWater {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	if c.shut {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.buf = append(c.buf, p...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *coalescingConn) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.buf) == 0 && !c.shut {
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		if len(c.buf) == 0 { // shut and drained
			c.mu.Unlock()
			return
		}
		out := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()

		_, err := c.Conn.Write(out)

		c.mu.Lock()
		c.spare = out[:0]
		if err != nil && c.err == nil {
			c.err = err
			c.buf = nil
			c.Conn.Close()
		}
		failed := c.err != nil
		c.cond.Broadcast()
		c.mu.Unlock()
		if failed {
			return
		}
	}
}

// Close closes the socket and stops the writer. The library closes the
// socket only after the closing handshake (or after a failure), so what is
// still queued then is not needed.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	already := c.shut
	c.shut = true
	c.cond.Broadcast()
	c.mu.Unlock()
	err := c.Conn.Close()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
	if already || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
