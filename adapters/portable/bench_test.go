package portable_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// benchDriver hands out the same pre-built records on every ReceiveBatch
// and accepts every acknowledgement: it allocates nothing, so a benchmark
// over it counts what the portable layer allocates per delivery.
type benchDriver struct{ sub *benchSub }

func (d *benchDriver) Name() string { return "bench" }
func (d *benchDriver) Capabilities() ports.Capabilities {
	return ports.Capabilities{PublisherConfirm: true, PerMessageAck: true, NativeBatch: true, DelayedMessage: true, DelayedRequeue: true}
}
func (d *benchDriver) SendBatch(context.Context, []ports.Message) []error { return nil }
func (d *benchDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return d.sub, nil
}
func (d *benchDriver) Classify(error) driver.Class        { return driver.Class{} }
func (d *benchDriver) Close(context.Context) error        { return nil }
func (s *benchSub) SendAcks(context.Context, []any) error { return nil }
func (s *benchSub) Close(context.Context) error           { return nil }

type benchSub struct{ recs []driver.Record }

func (s *benchSub) ReceiveBatch(_ context.Context, max int) ([]driver.Record, error) {
	return s.recs[:min(max, len(s.recs))], nil
}

func newBenchSub(n int) *benchSub {
	h := ports.NewHeaders(ports.HeaderID, "m", ports.HeaderContentType, "application/json")
	facts := ports.NewFacts(ports.FactMap{"queue": "bench"})
	s := &benchSub{recs: make([]driver.Record, n)}
	for i := range s.recs {
		s.recs[i] = driver.Record{Message: ports.Message{Topic: "t", Payload: []byte(`{"id":"o-1","total":42}`), Headers: h}, Facts: facts, Handle: i}
	}
	return s
}

// BenchmarkReceiveSettle receives batches of the given size and acks each
// batch with one Settle: one op is one delivery, so allocs/op is the
// portable layer's allocations per delivery on the consume path. With
// append, the deliveries are received into one slice reused from batch to
// batch (ports.ReceiveAppender, as flow receives them).
func BenchmarkReceiveSettle(b *testing.B) {
	for _, c := range []struct {
		batch  int
		append bool
	}{{1, false}, {2, false}, {16, false}, {100, false}, {1, true}, {2, true}, {16, true}, {100, true}} {
		batch := c.batch
		b.Run(fmt.Sprintf("batch=%d/append=%v", batch, c.append), func(b *testing.B) {
			ctx := context.Background()
			a := portable.New(&benchDriver{sub: newBenchSub(batch)}, portable.Options{Logger: quiet})
			defer a.Close(ctx)
			sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: batch})
			if err != nil {
				b.Fatal(err)
			}
			ack := ports.Disposition{Action: ports.Ack}
			var buf []*ports.Delivery
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; {
				var ds []*ports.Delivery
				if c.append {
					ds, err = sub.(ports.ReceiveAppender).ReceiveAppend(ctx, buf[:0], batch)
					buf = ds
				} else {
					ds, err = sub.Receive(ctx, batch)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := sub.Settle(ctx, ds, ack); err != nil {
					b.Fatal(err)
				}
				n += len(ds)
			}
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			// allocs/op, truncated to a whole number, hides one
			// allocation per batch of two.
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "allocs/delivery")
		})
	}
}
