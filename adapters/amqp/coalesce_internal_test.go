package amqp

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// TestCoalescingConnKeepsOrder: bytes written by many goroutines arrive
// whole and in each writer's order, and Close closes the socket.
func TestCoalescingConnKeepsOrder(t *testing.T) {
	client, server := net.Pipe()
	cc := newCoalescingConn(client)
	const writers, each = 8, 500
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, writers*each*3)
		n, _ := io.ReadFull(server, b)
		got <- b[:n]
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := cc.Write([]byte{byte(w), byte(i >> 8), byte(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b := <-got // everything written arrived before Close
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Write([]byte("late")); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	if len(b) != writers*each*3 {
		t.Fatalf("received %d bytes, want %d", len(b), writers*each*3)
	}
	next := make([]int, writers)
	for i := 0; i < len(b); i += 3 {
		w, n := int(b[i]), int(b[i+1])<<8|int(b[i+2])
		if n != next[w] {
			t.Fatalf("writer %d: frame %d arrived where %d was due", w, n, next[w])
		}
		next[w]++
	}
}

// TestCoalescingConnFailure: a failed socket write is returned by every
// later Write and closes the socket.
func TestCoalescingConnFailure(t *testing.T) {
	client, server := net.Pipe()
	server.Close()
	cc := newCoalescingConn(client)
	defer cc.Close()
	_, _ = cc.Write([]byte("frame"))
	var err error
	for err == nil {
		cc.mu.Lock()
		for cc.err == nil && len(cc.buf) > 0 {
			cc.cond.Wait()
		}
		cc.mu.Unlock()
		_, err = cc.Write([]byte("more"))
	}
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Write after a failed send returned %v", err)
	}
	if _, rerr := client.Read(make([]byte, 1)); rerr == nil {
		t.Fatal("socket still open after a failed write")
	}
}
