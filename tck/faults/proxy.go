package faults

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy in front of a broker, for cutting and
// black-holing an adapter's connections while the broker keeps running.
// Point the adapter at Addr instead of the broker's address.
//
//   - Reset closes every proxied connection with a TCP reset (both sides
//     see "connection reset by peer"), as a crashed NAT or a killed
//     load balancer would.
//   - Stall stops forwarding in both directions without closing anything:
//     bytes, FINs and new connections' first bytes are held, as on a link
//     that silently drops packets (stalled reads). Resume delivers what
//     was held and forwards again; Reset while stalled tears the dead
//     connections down.
//   - Refuse resets new connections as soon as they are accepted (the
//     broker is unreachable) until it is turned off.
//   - ResetOn resets the first connection that sends a given byte string
//     towards the broker, before forwarding it: a connection lost at one
//     chosen step of a protocol exchange (a subscribe, a commit).
//
// A Proxy is safe for concurrent use. Close it when done; Close waits for
// every goroutine it started.
type Proxy struct {
	ln       net.Listener
	upstream string
	from, to []byte // NewRewritingProxy: replace from with to in upstream bytes

	mu      sync.Mutex
	conns   map[*link]struct{}
	flowing chan struct{} // closed while forwarding; replaced by Stall
	linked  chan struct{} // closed, and replaced, when a connection is linked
	refuse  bool
	resetOn []byte // ResetOn's pattern until it fired
	closed  bool
	wg      sync.WaitGroup
	stats   ProxyStats
}

// ProxyStats counts what a Proxy did.
type ProxyStats struct {
	Accepted int // connections accepted
	Linked   int // connections linked to the upstream (accepted and dialled through)
	Reset    int // connections reset by Reset, Refuse or ResetOn
	Live     int // connections open now
}

// link is one proxied connection: the client side and the upstream side.
type link struct {
	client, up net.Conn
	done       chan struct{}
	once       sync.Once
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			for _, c := range []net.Conn{l.client, l.up} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // close with RST, not FIN
				}
			}
		}
		_ = l.client.Close()
		_ = l.up.Close()
		close(l.done)
	})
}

// NewProxy listens on a free 127.0.0.1 port and forwards every connection
// to upstream ("127.0.0.1:port").
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy listen: %w", err)
	}
	return startProxy(ln, upstream, nil, nil), nil
}

// NewRewritingProxy is NewProxy for brokers that advertise their own
// address to clients (a Pulsar lookup answers with the broker's URL, and
// the client then connects there directly): it replaces every occurrence
// of upstream in the bytes coming from the broker by the proxy's own
// address, so that the client keeps talking through the proxy. The
// replacement must not change any length field of the protocol, so the
// proxy picks a port with as many digits as upstream's; a framed protocol
// with checksums over the rewritten bytes cannot be proxied this way.
func NewRewritingProxy(upstream string) (*Proxy, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("faults: proxy listen: %w", err)
		}
		if len(ln.Addr().String()) == len(upstream) {
			return startProxy(ln, upstream, []byte(upstream), []byte(ln.Addr().String())), nil
		}
		_ = ln.Close()
	}
	return nil, fmt.Errorf("faults: no free port with an address as long as %q", upstream)
}

func startProxy(ln net.Listener, upstream string, from, to []byte) *Proxy {
	p := &Proxy{ln: ln, upstream: upstream, from: from, to: to, conns: map[*link]struct{}{}, flowing: make(chan struct{}), linked: make(chan struct{})}
	close(p.flowing)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns the proxy's counters.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.conns)
	return s
}

// nextLink returns a channel closed when the next connection is linked.
func (p *Proxy) nextLink() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.linked
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.stats.Accepted++
		if p.closed || p.refuse {
			p.stats.Reset++
			p.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = client.Close()
		return
	}
	l := &link{client: client, up: up, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(true)
		return
	}
	p.conns[l] = struct{}{}
	p.stats.Linked++
	close(p.linked)
	p.linked = make(chan struct{})
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, up, client, p.from, p.to, false) }()
	go func() { defer wg.Done(); p.pump(l, client, up, nil, nil, true) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pump copies src to dst, waiting while the proxy is stalled, until either
// side fails; then it closes the link (so the other pump ends too). On the
// way to the broker (toBroker) it watches for ResetOn's pattern.
func (p *Proxy) pump(l *link, src, dst net.Conn, from, to []byte, toBroker bool) {
	defer l.close(false)
	buf := make([]byte, 32*1024)
	var carry []byte // a tail that may start an occurrence of from
	var sent []byte  // toBroker: the last bytes forwarded, for a pattern split across reads
	for {
		if len(carry) > 0 {
			// Do not hold a partial match behind a quiet peer.
			_ = src.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		}
		n, err := src.Read(buf)
		var data []byte
		var ne net.Error
		switch {
		case len(carry) > 0 && err != nil && errors.As(err, &ne) && ne.Timeout():
			_ = src.SetReadDeadline(time.Time{})
			data, carry, err = carry, nil, nil
		case from != nil:
			if len(carry) > 0 {
				_ = src.SetReadDeadline(time.Time{})
			}
			data, carry = rewrite(append(carry, buf[:n]...), from, to, err != nil)
		default:
			data = buf[:n]
		}
		if !p.wait(l) {
			return
		}
		if toBroker && len(data) > 0 {
			if p.resetMatch(sent, data) {
				l.close(true)
				return
			}
			sent = append(sent, data[max(0, len(data)-64):]...) // only a tail is ever matched
			sent = sent[max(0, len(sent)-64):]
		}
		if len(data) > 0 {
			if _, werr := dst.Write(data); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// rewrite replaces from by to in b and returns what may be written now and
// a tail that could be the start of another occurrence (kept for the next
// read unless final).
func rewrite(b, from, to []byte, final bool) (out, carry []byte) {
	b = bytes.ReplaceAll(b, from, to)
	if final {
		return b, nil
	}
	for k := min(len(from)-1, len(b)); k > 0; k-- {
		if bytes.HasPrefix(from, b[len(b)-k:]) {
			return b[:len(b)-k], append([]byte(nil), b[len(b)-k:]...)
		}
	}
	return b, nil
}

// wait blocks while the proxy is stalled; false when the link closed.
func (p *Proxy) wait(l *link) bool {
	p.mu.Lock()
	ch := p.flowing
	p.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-l.done:
		return false
	}
}

// Reset closes every proxied connection with a TCP reset and returns how
// many it closed. New connections are accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.stats.Reset += len(ls)
	p.mu.Unlock()
	for _, l := range ls {
		l.close(true)
	}
	return len(ls)
}

// Stall stops forwarding in both directions on every connection, old and
// new, until Resume. Nothing is closed.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already stalled
	}
}

// Resume forwards again, held bytes first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// ResetOn arms the proxy: the first connection, old or new, that sends
// pattern towards the broker is reset (TCP reset on both sides) before
// the bytes holding it are forwarded. It fires once; ResetOn again to
// re-arm, or with "" to disarm. pattern is at most 64 bytes.
func (p *Proxy) ResetOn(pattern string) {
	if len(pattern) > 64 {
		panic("faults: ResetOn pattern longer than 64 bytes")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetOn = nil
	if pattern != "" {
		p.resetOn = []byte(pattern)
	}
}

// resetMatch reports whether the armed pattern occurs in data, or across
// the end of sent (what this connection forwarded before) and data; a
// match disarms the pattern and counts a reset.
func (p *Proxy) resetMatch(sent, data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pat := p.resetOn
	if pat == nil {
		return false
	}
	seen := data
	if k := min(len(sent), len(pat)-1); k > 0 {
		seen = append(append(make([]byte, 0, k+len(data)), sent[len(sent)-k:]...), data...)
	}
	if !bytes.Contains(seen, pat) {
		return false
	}
	p.resetOn = nil
	p.stats.Reset++
	return true
}

// Refuse makes the proxy reset every new connection (on) or accept them
// again (off). Existing connections are not touched.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Close stops accepting, resets every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Resume()
	p.Reset()
	p.wg.Wait()
}
