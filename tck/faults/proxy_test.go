package faults

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is an upstream server that echoes every line, prefixed with its
// own address when asked ("whoami").
type echo struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs []net.Conn
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.cs = append(e.cs, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					line := sc.Text()
					if line == "whoami" {
						line = "I am pulsar://" + ln.Addr().String() + "/"
					}
					if _, err := io.WriteString(c, line+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		e.mu.Lock()
		for _, c := range e.cs {
			_ = c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func newTestProxy(t *testing.T, upstream string, rewriting bool) *Proxy {
	t.Helper()
	var p *Proxy
	var err error
	if rewriting {
		p, err = NewRewritingProxy(upstream)
	} else {
		p, err = NewProxy(upstream)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

// dialProxy connects through p and returns once the proxy has linked the
// connection to its upstream (the kernel accepts before the proxy does).
func dialProxy(t *testing.T, p *Proxy) *client {
	t.Helper()
	linked := p.Stats().Linked
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Linked <= linked {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not link the new connection within 5s (stats %+v)", p.Stats())
		}
		time.Sleep(time.Millisecond) // polling the proxy's counter, bounded above
	}
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip writes line and reads the answer within d.
func (c *client) roundTrip(line string, d time.Duration) (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(d))
	defer func() { _ = c.c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func TestProxyForwards(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	c := dialProxy(t, p)
	for _, s := range []string{"hello", strings.Repeat("x", 50_000)} {
		got, err := c.roundTrip(s, 5*time.Second)
		if err != nil || got != s {
			t.Fatalf("round trip of %d bytes: %d bytes, %v", len(s), len(got), err)
		}
	}
	if s := p.Stats(); s.Accepted != 1 || s.Live != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// nextLink's channel closes once a connection is linked through, and the
// next call returns a fresh one (what links.awaitLive waits on).
func TestProxyNextLinkSignalsEachConnection(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	next := p.nextLink()
	select {
	case <-next:
		t.Fatal("nextLink signalled before any connection")
	default:
	}
	dialProxy(t, p)
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("a connection was linked through the proxy and nextLink's channel stayed open for 10s")
	}
	if again := p.nextLink(); again == next {
		t.Fatal("nextLink returned the closed channel again: a wait for the next connection would not wait")
	}
	if s := p.Stats(); s.Live != 1 {
		t.Fatalf("stats %+v, want one live connection", s)
	}
}

func TestProxyResetSendsRST(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	c := dialProxy(t, p)
	if _, err := c.roundTrip("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset closed %d connections, want 1", n)
	}
	_, err := c.roundTrip("after", 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("after Reset: %v, want connection reset", err)
	}
	// New connections work.
	c2 := dialProxy(t, p)
	if got, err := c2.roundTrip("again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("new connection after Reset: %q, %v", got, err)
	}
}

func TestProxyStallHoldsThenResumeDelivers(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	c := dialProxy(t, p)
	p.Stall()
	var ne net.Error
	if _, err := c.roundTrip("held", 200*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("while stalled: %v, want a read timeout (nothing forwarded)", err)
	}
	p.Resume()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := c.r.ReadString('\n')
	if err != nil || got != "held\n" {
		t.Fatalf("after Resume: %q, %v; want the held line delivered", got, err)
	}
}

func TestProxyStallThenResetTearsDown(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	c := dialProxy(t, p)
	p.Stall()
	_, _ = io.WriteString(c.c, "lost\n")
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset while stalled closed %d, want 1", n)
	}
	p.Resume()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err == nil {
		t.Fatalf("read %q from a torn-down connection", got)
	}
}

func TestProxyRefuse(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	p.Refuse(true)
	if c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		cl := &client{c: c, r: bufio.NewReader(c)}
		_, err = cl.roundTrip("x", 5*time.Second)
		_ = c.Close()
		if err == nil {
			t.Fatal("a refused connection answered")
		}
	}
	p.Refuse(false)
	c := dialProxy(t, p)
	if got, err := c.roundTrip("y", 5*time.Second); err != nil || got != "y" {
		t.Fatalf("after Refuse(false): %q, %v", got, err)
	}
}

func TestRewritingProxyKeepsClientsOnTheProxy(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), true)
	c := dialProxy(t, p)
	got, err := c.roundTrip("whoami", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := "I am pulsar://" + p.Addr() + "/"; got != want {
		t.Fatalf("rewritten answer %q, want %q", got, want)
	}
	// Bytes from the client are not rewritten.
	s := "to " + up.ln.Addr().String()
	if got, err := c.roundTrip(s, 5*time.Second); err != nil || !strings.HasPrefix(got, "to ") {
		t.Fatalf("round trip: %q, %v", got, err)
	}
}

func TestRewrite(t *testing.T) {
	from, to := []byte("127.0.0.1:40000"), []byte("127.0.0.1:51111")
	cases := []struct {
		in, out, carry string
		final          bool
	}{
		{"abc", "abc", "", false},
		{"x127.0.0.1:40000y", "x127.0.0.1:51111y", "", false},
		{"x127.0.0.1:4", "x", "127.0.0.1:4", false},
		{"x127.0.0.1:4", "x127.0.0.1:4", "", true},
		{"x1", "x", "1", false},
	}
	for _, c := range cases {
		out, carry := rewrite([]byte(c.in), from, to, c.final)
		if string(out) != c.out || string(carry) != c.carry {
			t.Errorf("rewrite(%q, final=%v) = %q + carry %q, want %q + %q", c.in, c.final, out, carry, c.out, c.carry)
		}
	}
	// Split across reads.
	var got bytes.Buffer
	out, carry := rewrite([]byte("a127.0.0"), from, to, false)
	got.Write(out)
	out, _ = rewrite(append(carry, ".1:40000b"...), from, to, true)
	got.Write(out)
	if got.String() != "a127.0.0.1:51111b" {
		t.Fatalf("split rewrite %q", got.String())
	}
}

func TestRunPatternAndParseGot(t *testing.T) {
	if got := runPattern("TestReliability/with space.x"); got != `^TestReliability$/^with space\.x$` {
		t.Fatalf("runPattern %q", got)
	}
	id, pos, ok := parseGot(`GOT ledger-1 "(1,2,-1,-1)"`)
	if !ok || id != "ledger-1" || pos != "(1,2,-1,-1)" {
		t.Fatalf("parseGot: %q %q %v", id, pos, ok)
	}
	for _, bad := range []string{"READY", "GOT x", `GOT x "unterminated`} {
		if _, _, ok := parseGot(bad); ok {
			t.Errorf("parseGot(%q) accepted", bad)
		}
	}
}

// ResetOn resets the first connection that sends the pattern, even split
// across reads, before forwarding it, and fires once.
func TestProxyResetOnCutsTheFirstMatchingConnection(t *testing.T) {
	up := startEcho(t)
	p := newTestProxy(t, up.ln.Addr().String(), false)
	c1 := dialProxy(t, p)
	c2 := dialProxy(t, p)
	p.ResetOn("SUBSCRIBE\n")
	if got, err := c1.roundTrip("SUBSCRIB", 5*time.Second); err != nil || got != "SUBSCRIB" {
		t.Fatalf("a partial pattern: %q, %v; want it forwarded", got, err)
	}
	if _, err := c1.roundTrip("SUBSCRIBE", 5*time.Second); err == nil {
		t.Fatal("the connection that sent the pattern answered: it was not reset")
	}
	if s := p.Stats(); s.Reset != 1 {
		t.Fatalf("stats %+v, want 1 reset", s)
	}
	if got, err := c2.roundTrip("SUBSCRIBE", 5*time.Second); err != nil || got != "SUBSCRIBE" {
		t.Fatalf("after the pattern fired once: %q, %v; want it forwarded", got, err)
	}
	// Split across reads: the echo's answer to "ping" proves the proxy
	// forwarded the first half before the second was written.
	p.ResetOn("ping\npong\n")
	if got, err := c2.roundTrip("ping", 5*time.Second); err != nil || got != "ping" {
		t.Fatalf("the pattern's first half: %q, %v; want it forwarded", got, err)
	}
	if got, err := c2.roundTrip("pong", 5*time.Second); err == nil {
		t.Fatalf("a pattern split across reads was forwarded: answered %q", got)
	}
	if s := p.Stats(); s.Reset != 2 {
		t.Fatalf("stats %+v, want 2 resets", s)
	}
}
