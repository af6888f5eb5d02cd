package mem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestConcurrentCompetingConsumers runs several senders against two
// competing adapters whose settlements run on many goroutines. Each
// message is requeued on its first delivery and acked on its second, so
// every message must be acked exactly once, with redelivery count 1, and
// nothing may be left over.
func TestConcurrentCompetingConsumers(t *testing.T) {
	const senders, perSender = 4, 500
	const total = senders * perSender
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	acked := map[string]int{}
	perInstance := [2]int{}
	done := make(chan struct{})
	var consumers sync.WaitGroup
	for inst := range 2 {
		a := newAdapter(t, b)
		spec := lb("orders", "g")
		spec.InFlight = 16
		s := subscribe(t, a, spec)
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			var settlers sync.WaitGroup
			defer settlers.Wait()
			for {
				ds, err := s.Receive(ctx, 8)
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("instance %d Receive: %v", inst, err)
					}
					return
				}
				for _, d := range ds {
					settlers.Add(1)
					go func() {
						defer settlers.Done()
						disp := ack
						if d.RedeliveryCount == 0 {
							disp = requeue
						}
						if err := s.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
							t.Errorf("Settle: %v", err)
							return
						}
						if disp.Action != ports.Ack {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if d.RedeliveryCount != 1 {
							t.Errorf("%s acked with RedeliveryCount %d, want 1", d.Payload, d.RedeliveryCount)
						}
						acked[string(d.Payload)]++
						perInstance[inst]++
						if len(acked) == total && perInstance[0]+perInstance[1] == total {
							close(done)
						}
					}()
				}
			}
		}()
	}

	sender := newAdapter(t, b)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				msg := ports.Message{Topic: "orders", Payload: fmt.Appendf(nil, "%d-%d", g, i)}
				if err := sender.Send(ctx, msg); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("only %d of %d messages acked before the deadline", len(acked), total)
	}
	cancel()
	consumers.Wait()

	for p, n := range acked {
		if n != 1 {
			t.Errorf("%s acked %d times", p, n)
		}
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 || q.InFlight != 0 || q.Delayed != 0 {
		t.Fatalf("left over: %+v", q)
	}
	t.Logf("acked per instance: %v", perInstance)
}

// TestConcurrentStopWhileBusy stops a subscription while its receiver
// (asking for 4, then for 64: a receive hands out 16 at most) and settlers
// run, and checks that every message is either acked or back in the
// queue — never lost, never both.
func TestConcurrentStopWhileBusy(t *testing.T) {
	for _, max := range []int{4, 64} {
		t.Run(fmt.Sprintf("max%d", max), func(t *testing.T) { stopWhileBusy(t, max) })
	}
}

func stopWhileBusy(t *testing.T, max int) {
	const n = 300
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	msgs := make([]ports.Message, n)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "orders", Payload: fmt.Appendf(nil, "%d", i)}
	}
	if err := a.Send(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	halfway := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		received := 0
		for {
			ds, err := s.Receive(context.Background(), max)
			if err != nil {
				if !errors.Is(err, ports.ErrClosed) {
					t.Errorf("Receive: %v", err)
				}
				return
			}
			for _, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := s.Settle(context.Background(), []*ports.Delivery{d}, ack)
					switch {
					case err == nil:
						mu.Lock()
						acked[string(d.Payload)] = true
						mu.Unlock()
					case !errors.Is(err, ports.ErrClosed):
						t.Errorf("Settle: %v", err)
					}
				}()
			}
			if received += len(ds); received >= n/2 {
				once.Do(func() { close(halfway) })
			}
		}
	}()
	<-halfway
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	spec := lb("orders", "g")
	spec.InFlight = n
	rest := subscribe(t, newAdapter(t, b), spec)
	left := queueStats(t, b, "orders", "g").Ready
	for _, d := range receive(t, rest, left) {
		if acked[string(d.Payload)] {
			t.Errorf("%s was acked and is still in the queue", d.Payload)
		}
		acked[string(d.Payload)] = true
	}
	if len(acked) != n {
		t.Fatalf("%d of %d messages accounted for", len(acked), n)
	}
}
