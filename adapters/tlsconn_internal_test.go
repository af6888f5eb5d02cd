package adapters

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
)

// refusedConn plays the socket of a broker that sent a TLS alert and reset
// the connection before the client wrote: writes fail with the reset, a
// read returns the alert once released, and Close is recorded.
type refusedConn struct {
	net.Conn // nil: only Read, Write and Close are used
	alert    error
	release  chan struct{}
	mu       sync.Mutex
	closed   bool
	closes   chan struct{}
}

func newRefusedConn(alert error) *refusedConn {
	return &refusedConn{alert: alert, release: make(chan struct{}), closes: make(chan struct{}, 4)}
}

func (c *refusedConn) Read([]byte) (int, error) {
	<-c.release
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed // what a read after a local close gets
	}
	return 0, c.alert
}

func (c *refusedConn) Write([]byte) (int, error) {
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

func (c *refusedConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.closes <- struct{}{}
	return nil
}

func (c *refusedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// TestAlertConnHoldsCloseForTheAlert is the refusal as it happens under
// load: the protocol header's write fails with the reset before the reader
// read. The writer's close must not reach the socket before the reader
// read the alert waiting there (it would read "use of closed network
// connection" instead), and the library's close after that read must.
func TestAlertConnHoldsCloseForTheAlert(t *testing.T) {
	alert := errors.New("remote error: tls: expired certificate")
	raw := newRefusedConn(alert)
	rec := &AlertConn{Conn: raw, dialing: true}
	cc := rec
	if _, err := cc.Write([]byte("AMQP\x00\x00\x09\x01")); err == nil {
		t.Fatal("first Write succeeded; want the reset")
	}
	cc.Close() // as amqp091's shutdown does after the failed write
	if raw.isClosed() {
		t.Fatal("the failed write closed the socket during the dial, before the reader read the alert")
	}
	close(raw.release)
	if _, err := cc.Read(make([]byte, 8)); !errors.Is(err, alert) {
		t.Fatalf("Read: %v; want the alert %v", err, alert)
	}
	if err := rec.Alert("broker:5671"); !errors.Is(err, ErrTLS) || !errors.Is(err, alert) {
		t.Fatalf("Alert() = %v; want the alert as a TLS error", err)
	}
	cc.Close() // as amqp091's reader does on the failed read
	if !raw.isClosed() {
		t.Fatal("Close after the failed read did not close the socket")
	}
	rec.Dialed()
	if n := len(raw.closes); n != 1 {
		t.Fatalf("socket closed %d times; want 1", n)
	}
}

// TestAlertConnDialedClosesAHeldClose: a close held during the dial is
// done when the dial returns, read or not, so no socket outlives it.
func TestAlertConnDialedClosesAHeldClose(t *testing.T) {
	raw := newRefusedConn(errors.New("unused"))
	rec := &AlertConn{Conn: raw, dialing: true}
	cc := rec
	cc.Write([]byte("x"))
	cc.Close()
	if raw.isClosed() {
		t.Fatal("closed during the dial before any read failed")
	}
	rec.Dialed()
	if !raw.isClosed() {
		t.Fatal("dialed did not close the held connection")
	}
	close(raw.release)
	if _, err := cc.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after dialed: %v; want net.ErrClosed", err)
	}
	cc.Close()
}

// TestAlertConnClosesAtOnceAfterTheDial: once the connection is open, a
// Close after a failed write closes the socket at once (the library's
// reader must fail and the connection shut down).
func TestAlertConnClosesAtOnceAfterTheDial(t *testing.T) {
	raw := newRefusedConn(errors.New("unused"))
	rec := &AlertConn{Conn: raw, dialing: true}
	rec.Dialed()
	cc := rec
	cc.Write([]byte("x"))
	cc.Close()
	if !raw.isClosed() {
		t.Fatal("a failed write after the dial did not close the socket")
	}
	close(raw.release)
	cc.Close()
}
