package portable_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// abandonDriver delivers two records once and refuses every copy it is
// asked to publish; its subscription records what it is told to abandon.
type abandonDriver struct {
	mu        sync.Mutex
	abandoned []any
	acked     []any
}

func (*abandonDriver) Name() string { return "abandon" }
func (*abandonDriver) Capabilities() ports.Capabilities {
	return ports.Capabilities{PerMessageAck: true}
}
func (*abandonDriver) SendBatch(_ context.Context, msgs []ports.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = ports.ErrUnconfirmed
	}
	return errs
}
func (*abandonDriver) Classify(error) driver.Class { return driver.Class{} }
func (*abandonDriver) Close(context.Context) error { return nil }
func (d *abandonDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return &abandonSub{d: d}, nil
}

type abandonSub struct {
	d    *abandonDriver
	sent bool
}

func (s *abandonSub) ReceiveBatch(ctx context.Context, _ int) ([]driver.Record, error) {
	if !s.sent {
		s.sent = true
		return []driver.Record{
			{Handle: "r1", Message: ports.Message{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m1")}},
			{Handle: "r2", Message: ports.Message{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m2")}},
		}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s *abandonSub) SendAcks(_ context.Context, hs []any) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.acked = append(s.d.acked, hs...)
	return nil
}
func (s *abandonSub) Abandon(hs []any) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.abandoned = append(s.d.abandoned, hs...)
}
func (*abandonSub) Close(context.Context) error { return nil }

// A settlement that fails (here: the dead-letter copy is not confirmed)
// hands its records to a driver.Abandoner, which lets the broker redeliver
// them; a settlement that succeeds abandons nothing.
func TestFailedSettlementIsAbandoned(t *testing.T) {
	d := &abandonDriver{}
	a := portable.New(d, portable.Options{Logger: quiet})
	defer a.Close(context.Background())
	ctx := context.Background()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	ds, err := sub.Receive(ctx, 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive = %d deliveries, %v; want 2", len(ds), err)
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.DeadLetter}); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle DEAD_LETTER with its copy refused = %v, want ErrUnconfirmed", err)
	}
	if err := sub.Settle(ctx, ds[1:], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle ACK = %v", err)
	}
	abandoned := func() []any {
		d.mu.Lock()
		defer d.mu.Unlock()
		return slices.Clone(d.abandoned)
	}
	for end := time.Now().Add(10 * time.Second); len(abandoned()) == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // polling the fake driver, bounded
	}
	if got := abandoned(); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("abandoned %v within 10s, want [r1]: the record whose settlement failed, and only it", got)
	}
}

// handBackDriver is abandonDriver whose subscription requeues natively
// (a driver.Requeuer) instead of abandoning, with a delivery limit of 3.
type handBackDriver struct{ abandonDriver }

func (*handBackDriver) Capabilities() ports.Capabilities {
	return ports.Capabilities{PerMessageAck: true, DeliveryLimit: 3}
}
func (d *handBackDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return &handBackSub{d: d}, nil
}

type handBackSub struct {
	d    *handBackDriver
	sent bool
}

func (s *handBackSub) ReceiveBatch(ctx context.Context, _ int) ([]driver.Record, error) {
	if !s.sent {
		s.sent = true
		rec := func(h, id string, count int) driver.Record {
			return driver.Record{Handle: h, RedeliveryCount: count, Message: ports.Message{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, id)}}
		}
		return []driver.Record{rec("r1", "m1", 0), rec("r2", "m2", 0), rec("r3", "m3", 2)}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s *handBackSub) SendAcks(context.Context, []any) error { return nil }
func (s *handBackSub) SendRequeues(_ context.Context, hs []any, _ time.Duration) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.abandoned = append(s.d.abandoned, hs...)
	return nil
}
func (*handBackSub) Close(context.Context) error { return nil }

// A settlement that fails on a broker that would keep its deliveries
// with the consumer is handed back with the driver's native requeue a
// second later: only what is still unsettled then (here r2 is acked
// meanwhile, as flow's engine settles a failed round's members again),
// and never a delivery at the broker's delivery limit (r3: the broker
// would archive it).
func TestFailedSettlementIsRequeuedNatively(t *testing.T) {
	d := &handBackDriver{}
	a := portable.New(d, portable.Options{Logger: quiet})
	defer a.Close(context.Background())
	ctx := context.Background()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	ds, err := sub.Receive(ctx, 3)
	if err != nil || len(ds) != 3 {
		t.Fatalf("Receive = %d deliveries, %v; want 3", len(ds), err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.DeadLetter}); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle DEAD_LETTER with its copies refused = %v, want ErrUnconfirmed", err)
	}
	if err := sub.Settle(ctx, ds[1:2], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle ACK of r2 after the failure = %v", err)
	}
	requeued := func() []any {
		d.mu.Lock()
		defer d.mu.Unlock()
		return slices.Clone(d.abandoned)
	}
	for end := time.Now().Add(10 * time.Second); len(requeued()) == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // polling the fake driver, bounded
	}
	if got := requeued(); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("requeued %v within 10s, want [r1]: unsettled and below the delivery limit", got)
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); !errors.Is(err, portable.ErrAlreadySettled) {
		t.Fatalf("Settle of r1 after it was handed back = %v, want ErrAlreadySettled", err)
	}
}

// plainDriver is abandonDriver whose subscription neither abandons nor
// requeues: its broker leaves an unsettled record with the consumer.
type plainDriver struct{ abandonDriver }

func (d *plainDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return &plainSub{abandonSub{d: &d.abandonDriver}}, nil
}

type plainSub struct{ s abandonSub }

func (p *plainSub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	return p.s.ReceiveBatch(ctx, max)
}
func (p *plainSub) SendAcks(ctx context.Context, hs []any) error { return p.s.SendAcks(ctx, hs) }
func (*plainSub) Close(context.Context) error                    { return nil }

// A settlement that fails on a driver that can neither abandon nor
// requeue is handed out again by the portable layer a second later: a new
// delivery of the same record, counted one more redelivery; the first
// one can no longer be settled, the second is acked on the record.
func TestFailedSettlementIsHandedOutAgain(t *testing.T) {
	d := &plainDriver{}
	a := portable.New(d, portable.Options{Logger: quiet})
	defer a.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	ds, err := sub.Receive(ctx, 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive = %d deliveries, %v; want 2", len(ds), err)
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.DeadLetter}); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle DEAD_LETTER with its copy refused = %v, want ErrUnconfirmed", err)
	}
	again, err := sub.Receive(ctx, 2)
	if err != nil || len(again) != 1 {
		t.Fatalf("Receive after the failed settlement = %d deliveries, %v; want the one handed out again", len(again), err)
	}
	if again[0].ID != "m1" || again[0].RedeliveryCount != 1 || again[0] == ds[0] {
		t.Fatalf("handed out again: id %q, redelivery count %d, same delivery %v; want m1, 1, a new delivery", again[0].ID, again[0].RedeliveryCount, again[0] == ds[0])
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); !errors.Is(err, portable.ErrAlreadySettled) {
		t.Fatalf("Settle of the first delivery after it was handed out again = %v, want ErrAlreadySettled", err)
	}
	if err := sub.Settle(ctx, again, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle ACK of the delivery handed out again = %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.acked) != 1 || d.acked[0] != "r1" {
		t.Fatalf("acked %v, want [r1]", d.acked)
	}
}
