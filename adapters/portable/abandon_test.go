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

// handBackDriver delivers its records once and refuses every copy it is
// asked to publish; its subscriptions record what they ack and what they
// are told to hand back. As the way back, the subscription it makes is
// an Abandoner (back: abandoned), a Requeuer (back: requeued, with a
// delivery limit of 3) or neither (back: plain).
type handBackDriver struct {
	back string
	recs []driver.Record

	mu        sync.Mutex
	acked     []any
	givenBack []any // abandoned or requeued
}

func rec(h, id string, count int) driver.Record {
	return driver.Record{Handle: h, RedeliveryCount: count, Message: ports.Message{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, id)}}
}

func (*handBackDriver) Name() string { return "handback" }
func (d *handBackDriver) Capabilities() ports.Capabilities {
	c := ports.Capabilities{PerMessageAck: true}
	if d.back == "requeued" {
		c.DeliveryLimit = 3
	}
	return c
}
func (*handBackDriver) SendBatch(_ context.Context, msgs []ports.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = ports.ErrUnconfirmed
	}
	return errs
}
func (*handBackDriver) Classify(error) driver.Class { return driver.Class{} }
func (*handBackDriver) Close(context.Context) error { return nil }
func (d *handBackDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &recordsSub{d: d}
	switch d.back {
	case "abandoned":
		return abandonSub{s}, nil
	case "requeued":
		return requeueSub{s}, nil
	}
	return s, nil
}

// recordsSub hands out the driver's records once and records acks.
type recordsSub struct {
	d    *handBackDriver
	sent bool
}

func (s *recordsSub) ReceiveBatch(ctx context.Context, _ int) ([]driver.Record, error) {
	if !s.sent {
		s.sent = true
		return slices.Clone(s.d.recs), nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s *recordsSub) SendAcks(_ context.Context, hs []any) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.acked = append(s.d.acked, hs...)
	return nil
}
func (*recordsSub) Close(context.Context) error { return nil }

func (s *recordsSub) giveBack(hs []any) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.givenBack = append(s.d.givenBack, hs...)
}

// givenBackWithin waits, bounded, for a hand-back and returns what was
// given back.
func (d *handBackDriver) givenBackWithin(wait time.Duration) []any {
	for end := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) { // polling the fake driver, bounded
		d.mu.Lock()
		got := slices.Clone(d.givenBack)
		d.mu.Unlock()
		if len(got) > 0 || time.Now().After(end) {
			return got
		}
	}
}

type abandonSub struct{ *recordsSub }

func (s abandonSub) Abandon(hs []any) { s.giveBack(hs) }

type requeueSub struct{ *recordsSub }

func (s requeueSub) SendRequeues(_ context.Context, hs []any, _ time.Duration) error {
	s.giveBack(hs)
	return nil
}

// receiveAll subscribes to d and receives its records.
func receiveAll(t *testing.T, d *handBackDriver, inFlight int) (ports.Subscription, []*ports.Delivery) {
	t.Helper()
	a := portable.New(d, portable.Options{Logger: quiet})
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, len(d.recs))
	if err != nil || len(ds) != len(d.recs) {
		t.Fatalf("Receive = %d deliveries, %v; want %d", len(ds), err, len(d.recs))
	}
	return sub, ds
}

// A settlement that fails (here: the dead-letter copy is not confirmed)
// hands its records to a driver.Abandoner a second later, which lets the
// broker redeliver them; a settlement that succeeds abandons nothing.
func TestFailedSettlementIsAbandoned(t *testing.T) {
	d := &handBackDriver{back: "abandoned", recs: []driver.Record{rec("r1", "m1", 0), rec("r2", "m2", 0)}}
	sub, ds := receiveAll(t, d, 0)
	ctx := context.Background()
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.DeadLetter}); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle DEAD_LETTER with its copy refused = %v, want ErrUnconfirmed", err)
	}
	if err := sub.Settle(ctx, ds[1:], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle ACK = %v", err)
	}
	if got := d.givenBackWithin(10 * time.Second); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("abandoned %v within 10s, want [r1]: the record whose settlement failed, and only it", got)
	}
}

// A settlement that fails on a broker that would keep its deliveries
// with the consumer is handed back with the driver's native requeue a
// second later: only what is still unsettled then (here r2 is acked
// meanwhile, as flow's engine settles a failed round's members again),
// and never a delivery at the broker's delivery limit (r3: the broker
// would archive it).
func TestFailedSettlementIsRequeuedNatively(t *testing.T) {
	d := &handBackDriver{back: "requeued", recs: []driver.Record{rec("r1", "m1", 0), rec("r2", "m2", 0), rec("r3", "m3", 2)}}
	sub, ds := receiveAll(t, d, 0)
	ctx := context.Background()
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.DeadLetter}); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle DEAD_LETTER with its copies refused = %v, want ErrUnconfirmed", err)
	}
	if err := sub.Settle(ctx, ds[1:2], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle ACK of r2 after the failure = %v", err)
	}
	if got := d.givenBackWithin(10 * time.Second); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("requeued %v within 10s, want [r1]: unsettled and below the delivery limit", got)
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); !errors.Is(err, portable.ErrAlreadySettled) {
		t.Fatalf("Settle of r1 after it was handed back = %v, want ErrAlreadySettled", err)
	}
}

// A settlement that fails on a driver that can neither abandon nor
// requeue is handed out again by the portable layer a second later: a new
// delivery of the same record, counted one more redelivery; the first
// one can no longer be settled, the second is acked on the record.
func TestFailedSettlementIsHandedOutAgain(t *testing.T) {
	d := &handBackDriver{back: "plain", recs: []driver.Record{rec("r1", "m1", 0), rec("r2", "m2", 0)}}
	sub, ds := receiveAll(t, d, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
