package amqp

import (
	"net"
	"sync"
)

// recordingConn is the TLS connection of an amqps dial. It keeps the first
// read error: the TLS alert of a broker that refused the client
// certificate after the handshake (with TLS 1.3 the server checks it once
// the client has finished), which amqp091 reports only as a closed
// connection (Exception 501) or, during the login, as ErrCredentials.
//
// The alert must be read to be kept, and under load it is not read first:
// the broker sends it and closes (with a reset) before amqp091's reader
// goroutine ran, the protocol header's write then fails with "connection
// reset by peer", and coalescingConn closes the socket on that failure,
// so the reader's first read is "use of closed network connection" and
// the alert, received and waiting in the socket, is never seen. So while
// the dial runs, a Close that follows a failed write (before any read
// failed) is held: the reader goes on to read what the broker sent (the
// alert, or the reset's error), amqp091 shuts down on that, and its Close
// closes. The hold is bounded by the dial's deadline on the socket, and
// dialed ends it (closing a held connection) when amqp091 returns.
type recordingConn struct {
	net.Conn

	mu       sync.Mutex
	readErr  error // the first read error
	writeErr error // the first write error
	dialing  bool  // amqp091 is still opening the connection
	held     bool  // a Close was held (see above)
}

func newRecordingConn(c net.Conn) *recordingConn {
	return &recordingConn{Conn: c, dialing: true}
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if err != nil {
		r.mu.Lock()
		if r.readErr == nil {
			r.readErr = err
		}
		r.mu.Unlock()
	}
	return n, err
}

func (r *recordingConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	if err != nil {
		r.mu.Lock()
		if r.writeErr == nil {
			r.writeErr = err
		}
		r.mu.Unlock()
	}
	return n, err
}

// Close closes the connection, unless the dial is running, a write failed
// and no read has: then it holds the close until dialed or the next Close.
func (r *recordingConn) Close() error {
	r.mu.Lock()
	if r.dialing && r.writeErr != nil && r.readErr == nil && !r.held {
		r.held = true
		r.mu.Unlock()
		return nil
	}
	r.held = false
	r.mu.Unlock()
	return r.Conn.Close()
}

// dialed ends the dial: later Closes close at once, and a held one is
// done now.
func (r *recordingConn) dialed() {
	r.mu.Lock()
	r.dialing = false
	held := r.held
	r.held = false
	r.mu.Unlock()
	if held {
		r.Conn.Close()
	}
}

// firstErr returns the first read error (nil if no read failed).
func (r *recordingConn) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readErr
}
