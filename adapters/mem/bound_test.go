package mem_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

// A producer that outruns its consumer is held back: the queue never holds
// more than its bound (plus one per concurrent Send), and every message
// still arrives once.
func TestMaxQueueBoundsMemoryWhenProducerOutrunsConsumer(t *testing.T) {
	const bound, total, producers = 50, 2000, 4
	b := newBroker(t)
	a := newAdapter(t, b, mem.WithMaxQueue(bound))
	s := subscribe(t, a, lb("orders", "g"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := make(chan error, producers)
	for p := range producers {
		go func() {
			var err error
			for i := range total / producers {
				if err = a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte(strconv.Itoa(p*total + i))}); err != nil {
					break
				}
			}
			sent <- err
		}()
	}

	seen := map[string]bool{}
	maxReady := 0
	for len(seen) < total {
		// Let the producers fill the queue before each take: the consumer
		// is the slow side.
		waitFor(t, func() bool {
			st := queueStats(t, b, "orders", "g")
			return st.Ready >= bound || len(seen)+st.Ready == total
		})
		maxReady = max(maxReady, queueStats(t, b, "orders", "g").Ready)
		ds, err := s.Receive(ctx, 7)
		if err != nil {
			t.Fatalf("Receive after %d messages: %v", len(seen), err)
		}
		for _, d := range ds {
			if seen[string(d.Payload)] {
				t.Fatalf("message %s delivered twice", d.Payload)
			}
			seen[string(d.Payload)] = true
		}
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	for range producers {
		if err := <-sent; err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if maxReady > bound+producers {
		t.Fatalf("queue held %d ready messages, bound is %d (+%d concurrent senders)", maxReady, bound, producers)
	}
	if maxReady < bound {
		t.Fatalf("queue never reached its bound (max %d): the test did not make the producer outrun the consumer", maxReady)
	}
	if st := queueStats(t, b, "orders", "g"); st.MaxReady != bound {
		t.Fatalf("Stats MaxReady = %d, want %d", st.MaxReady, bound)
	}
}

func TestMaxQueueSendFailsWithQueueFullWhenCtxEnds(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b, mem.WithMaxQueue(2))
	subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "1", "2")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte("3")})
	var se *ports.SendError
	if !errors.As(err, &se) || se.Index != 0 {
		t.Fatalf("Send into a full queue = %v, want a *ports.SendError for #0", err)
	}
	if !errors.Is(err, mem.ErrQueueFull) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send into a full queue = %v, want ErrQueueFull and DeadlineExceeded", err)
	}
	if st := queueStats(t, b, "orders", "g"); st.Ready != 2 {
		t.Fatalf("Ready = %d after a failed send, want 2 (nothing of it stored)", st.Ready)
	}
}

func TestMaxQueueZeroIsUnboundedAndNegativeIsInvalid(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b, mem.WithMaxQueue(0))
	subscribe(t, a, lb("orders", "g"))
	msgs := make([]ports.Message, mem.DefaultMaxQueue+10)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "orders"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.New(b, mem.WithMaxQueue(-1)); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("WithMaxQueue(-1) = %v, want ErrInvalid", err)
	}
	d := newAdapter(t, b)
	subscribe(t, d, lb("other", "g"))
	if st := queueStats(t, b, "other", "g"); st.MaxReady != mem.DefaultMaxQueue {
		t.Fatalf("default MaxReady = %d, want %d", st.MaxReady, mem.DefaultMaxQueue)
	}
}

// A sender blocked on a full queue is released by the broker's Close.
func TestMaxQueueBlockedSendEndsOnBrokerClose(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b, mem.WithMaxQueue(1))
	subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "1")
	done := make(chan error, 1)
	go func() { done <- a.Send(context.Background(), ports.Message{Topic: "orders"}) }()
	_ = b.Close(context.Background())
	select {
	case err := <-done:
		if !errors.Is(err, ports.ErrClosed) {
			t.Fatalf("blocked Send after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked Send did not return within 5s of the broker's Close")
	}
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
