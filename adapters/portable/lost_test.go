package portable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// lostDriver hands out records without end and reports every ack as
// lost, as a RabbitMQ driver does for the delivery tags of a closed
// channel.
type lostDriver struct{}

func (lostDriver) Name() string                                       { return "lost" }
func (lostDriver) Capabilities() ports.Capabilities                   { return ports.Capabilities{PerMessageAck: true} }
func (lostDriver) SendBatch(context.Context, []ports.Message) []error { return nil }
func (lostDriver) Classify(error) driver.Class                        { return driver.Class{} }
func (lostDriver) Close(context.Context) error                        { return nil }
func (lostDriver) Subscribe(context.Context, ports.SubscriptionSpec) (driver.Subscription, error) {
	return lostSub{}, nil
}

type lostSub struct{}

func (lostSub) ReceiveBatch(context.Context, int) ([]driver.Record, error) {
	return []driver.Record{{Message: ports.Message{Payload: []byte("{}")}, Handle: 1}}, nil
}
func (lostSub) SendAcks(context.Context, []any) error { return driver.ErrRecordsLost }
func (lostSub) Close(context.Context) error           { return nil }

// TestRecordsLostFreeTheirSlotOnce: a settlement the driver reports as
// lost fails, and frees the delivery's in-flight slot once, however often
// it is settled again.
func TestRecordsLostFreeTheirSlotOnce(t *testing.T) {
	a := portable.New(lostDriver{}, portable.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer a.Close(ctx)
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); !errors.Is(err, driver.ErrRecordsLost) {
			t.Fatalf("Settle of a lost record returned %v, want ErrRecordsLost", err)
		}
	}
	if _, err := s.Receive(ctx, 1); err != nil {
		t.Fatalf("Receive after the lost record: %v (its slot was not freed)", err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if ds, err := s.Receive(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Receive with InFlight 1 returned %d deliveries, %v: the lost slot was freed twice", len(ds), err)
	}
}
