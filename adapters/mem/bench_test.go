package mem_test

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// BenchmarkSendReceiveSettle measures one message's full trip through the
// in-process broker: a producer goroutine sends b.N messages one Send at a
// time while the consumer receives up to 64 at a time and settles them —
// one Settle per delivery ("ack-each") or one per Receive ("ack-batch").
// "channels" is the floor: the same messages through a buffered Go
// channel. Run with -benchmem; allocs/op are per message.
func BenchmarkSendReceiveSettle(b *testing.B) {
	payload := make([]byte, 128)
	b.Run("ack-each", func(b *testing.B) { benchBroker(b, payload, false) })
	b.Run("ack-batch", func(b *testing.B) { benchBroker(b, payload, true) })
	b.Run("channels", func(b *testing.B) {
		ch := make(chan ports.Message, 64)
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			for range b.N {
				ch <- ports.Message{Topic: "bench", Payload: payload}
			}
			close(ch)
		}()
		n := 0
		for m := range ch {
			n += len(m.Payload)
		}
		if n != b.N*len(payload) {
			b.Fatalf("received %d bytes", n)
		}
	})
}

func benchBroker(b *testing.B, payload []byte, batch bool) {
	ctx := context.Background()
	broker := newBroker(b)
	a := newAdapter(b, broker)
	s := subscribe(b, a, ports.SubscriptionSpec{Topic: "bench", Group: "g", InFlight: 64})
	errc := make(chan error, 1)
	one := make([]*ports.Delivery, 1) // reused: Settle does not keep ds
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		msg := ports.Message{Topic: "bench", Payload: payload}
		for range b.N {
			if err := a.Send(ctx, msg); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for got := 0; got < b.N; {
		ds, err := s.Receive(ctx, 64)
		if err != nil {
			b.Fatal(err)
		}
		got += len(ds)
		if batch {
			if err := s.Settle(ctx, ds, ack); err != nil {
				b.Fatal(err)
			}
			continue
		}
		for _, d := range ds {
			one[0] = d
			if err := s.Settle(ctx, one, ack); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
