package portable_test

import (
	"context"
	"errors"
	"sync"
	"testing"

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
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.abandoned) != 1 || d.abandoned[0] != "r1" {
		t.Fatalf("abandoned %v, want [r1]: the record whose settlement failed, and only it", d.abandoned)
	}
}
