package activemq_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
)

// TestDeclareGroupRetriesALostConnection: a group declare whose connection
// dies after CONNECTED, at its SUBSCRIBE, is retried on a new connection,
// and the declared group then keeps what is published before its first
// consumer.
func TestDeclareGroupRetriesALostConnection(t *testing.T) {
	p := newCutProxy(t, activemqtest.Shared(t).StompAddr)
	a := newAdapter(t, activemq.Options{Addr: p.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	before := p.accepted.Load()
	p.armed.Store(true)
	if err := ports.DeclareGroup(ctx, a, "jobs", "workers"); err != nil {
		t.Fatalf("DeclareGroup over a connection cut at its SUBSCRIBE: %v, want it retried on a new connection", err)
	}
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("the proxy cut %d connections, want 1: the retry was not exercised", n)
	}
	if n := p.accepted.Load() - before; n < 2 {
		t.Fatalf("the declare used %d connection(s), want at least 2 (the cut one and its retry)", n)
	}
	keepsEarlyMessage(t, ctx, a, "jobs", "workers")
}

// cutProxy forwards connections to a STOMP broker. While armed, it drops
// the first connection that writes a SUBSCRIBE frame: both sockets are
// closed and the frame never reaches the broker.
type cutProxy struct {
	ln       net.Listener
	upstream string
	armed    atomic.Bool
	cuts     atomic.Int32
	accepted atomic.Int32

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		up, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.forward(c, up)
			_ = up.Close()
		}()
	}
}

// track records c and up for close, or closes them when the proxy is
// closing.
func (p *cutProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns = append(p.conns, c, up)
	return true
}

// forward copies the client's bytes to the broker until the cut.
func (p *cutProxy) forward(c, up net.Conn) {
	frame := []byte("SUBSCRIBE\n")
	var tail []byte // the end of the last read, for a frame split across reads
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			if bytes.Contains(seen, frame) && p.armed.CompareAndSwap(true, false) {
				p.cuts.Add(1)
				_ = c.Close()
				return
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
			tail = append(tail[:0], seen[max(0, len(seen)-len(frame)):]...)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = c.Close()
			}
			return
		}
	}
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
