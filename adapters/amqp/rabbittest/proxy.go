package rabbittest

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy is a loopback TCP proxy in front of a node, for fault tests: Cut
// drops every open connection at once (as a network failure would), and
// SetRefusing makes it refuse new ones until turned off.
type Proxy struct {
	// Addr is the proxy's listen address (127.0.0.1:port).
	Addr string

	target string
	ln     net.Listener

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	refusing bool
	closed   bool
	accepted int
	wg       sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL returns an AMQP URL (guest/guest) that goes through the proxy.
func (p *Proxy) URL() string { return "amqp://guest:guest@" + p.Addr + "/" }

// Accepted returns how many client connections the proxy accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refusing || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.accepted++
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every open connection through the proxy, in both directions,
// without any protocol goodbye. It returns how many client connections
// were cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		c.Close()
	}
	return n
}

// SetRefusing makes the proxy close new connections immediately (true),
// or accept them again (false).
func (p *Proxy) SetRefusing(on bool) {
	p.mu.Lock()
	p.refusing = on
	p.mu.Unlock()
}

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
