package embedded

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A mochi Server.Close that never returns must not hang Close (it once
// hung a test for 10 minutes).
func TestCloseIsBounded(t *testing.T) {
	b, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	real := b.serverClose
	defer func() { _ = real() }()
	block := make(chan struct{})
	defer close(block)
	b.serverClose = func() error { <-block; return nil }
	old := closeTimeout
	closeTimeout = 50 * time.Millisecond
	defer func() { closeTimeout = old }()

	returned := make(chan error, 1)
	go func() { returned <- b.Close() }()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "did not stop within") {
			t.Fatalf("Close = %v, want an error saying the broker did not stop in time", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s with a 50ms bound")
	}
}

// connectPacket is an MQTT 3.1.1 CONNECT with a clean session for id.
func connectPacket(id string) []byte {
	p := []byte{0x10, byte(12 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, byte(len(id))}
	return append(p, id...)
}

// Close while clients connect and disconnect: mochi's own client shutdown
// deadlocked when a client was removed during it. Close
// drains first, so it returns in time and leaves no connection goroutine.
func TestCloseWhileClientsComeAndGo(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for round := range 20 {
		b, err := Start(Options{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
					if err != nil {
						return // the broker closed its listener
					}
					_, _ = c.Write(connectPacket(fmt.Sprintf("c%d-%d-%d", round, g, i)))
					if i%2 == 0 {
						_ = c.SetReadDeadline(time.Now().Add(time.Second))
						_, _ = c.Read(make([]byte, 4)) // CONNACK: the client is attached
					}
					_ = c.Close()
				}
			}()
		}
		// Let some clients attach before Close (bounded: 2 s).
		deadline := time.Now().Add(2 * time.Second)
		for b.srv.Clients.Len() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling mochi's client count, bounded
		}
		err = b.Close()
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Close = %v, want nil (no deadlock)", round, err)
		}
	}
	goleak.VerifyNone(t, before)
}
