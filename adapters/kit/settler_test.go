package kit_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

type handle struct{ claim kit.Claim }

func (h *handle) Claim() *kit.Claim { return &h.claim }

// fakeBroker records what the Settler asks of it.
type fakeBroker struct {
	mu        sync.Mutex
	acks      [][]string
	published []ports.Message
	failPub   map[int]error // by index within one Publish call
	ackErr    error
}

func (b *fakeBroker) Ack(_ context.Context, ds []*ports.Delivery) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ackErr != nil {
		return b.ackErr
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	b.acks = append(b.acks, ids)
	return nil
}

func (b *fakeBroker) Publish(_ context.Context, msgs []ports.Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for i, m := range msgs {
		if err := b.failPub[i]; err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
			continue
		}
		b.published = append(b.published, m)
	}
	return errs
}

func deliveries(n int) []*ports.Delivery {
	ds := make([]*ports.Delivery, n)
	for i := range ds {
		id := "m" + strconv.Itoa(i)
		ds[i] = &ports.Delivery{
			Message:         ports.Message{Topic: "orders", Key: "k", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id, "x", "y")},
			ID:              id,
			RedeliveryCount: 2,
			Handle:          &handle{},
		}
	}
	return ds
}

func state(d *ports.Delivery) kit.State {
	st, _ := d.Handle.(*handle).claim.State()
	return st
}

func TestSettlerAckIsOneBrokerCallPerBatch(t *testing.T) {
	b := &fakeBroker{}
	s := kit.NewSettler(b)
	ds := deliveries(50)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if len(b.acks) != 1 || len(b.acks[0]) != 50 {
		t.Fatalf("acks = %d calls, want 1 call of 50", len(b.acks))
	}
	for _, d := range ds {
		if state(d) != kit.Done {
			t.Fatalf("%s is %v, want done", d.ID, state(d))
		}
	}
}

func TestSettlerRequeuePublishesCopiesThenAcks(t *testing.T) {
	b := &fakeBroker{}
	s := kit.NewSettler(b)
	ds := deliveries(3)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Requeue, Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	if len(b.published) != 3 || len(b.acks) != 1 {
		t.Fatalf("published %d, ack calls %d; want 3 and 1", len(b.published), len(b.acks))
	}
	for i, m := range b.published {
		if m.Topic != "orders" || m.Headers.Get(ports.HeaderRedeliveryCount) != "3" || m.Delay != time.Second || m.Headers.Get(kit.HeaderNotBefore) == "" || m.ID() != ds[i].ID {
			t.Fatalf("copy %d = %+v", i, m)
		}
	}
	if _, ok := ds[0].Headers.Lookup(ports.HeaderRedeliveryCount); ok {
		t.Fatal("RequeueCopy changed the original's headers")
	}
}

func TestSettlerDeadLetterFailedPublishLeavesOriginalsUnsettled(t *testing.T) {
	b := &fakeBroker{failPub: map[int]error{1: ports.ErrUnconfirmed}}
	s := kit.NewSettler(b)
	failedAt := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return failedAt }
	ds := deliveries(3)
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("bad"), Attempts: 4}
	err := s.Settle(context.Background(), ds, disp)
	if !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Settle = %v, want ErrUnconfirmed", err)
	}
	if len(b.acks) != 0 {
		t.Fatalf("acked %v after a failed dead-letter publish", b.acks)
	}
	for _, d := range ds {
		if state(d) != kit.Out {
			t.Fatalf("%s is %v after a failed publish, want out", d.ID, state(d))
		}
	}
	// Settle again once the broker recovers: the same deliveries settle.
	b.failPub = nil
	b.published = nil
	if err := s.Settle(context.Background(), ds, disp); err != nil {
		t.Fatal(err)
	}
	if len(b.acks) != 1 || len(b.published) != 3 {
		t.Fatalf("after recovery: %d ack calls, %d published", len(b.acks), len(b.published))
	}
	m := b.published[0]
	if m.Topic != "orders.dlq" || m.Headers.Get(ports.HeaderDeadLetterReason) != "bad" || m.Headers.Get(ports.HeaderAttempts) != "4" || m.Headers.Get(ports.HeaderDeadLetterTopic) != "orders" {
		t.Fatalf("dead-letter copy = %+v", m)
	}
	if got := m.Headers.Get(ports.HeaderDeadLetterTime); got != "2026-01-05T10:00:00Z" {
		t.Fatalf("dead-letter copy's %s = %q, want the settler's clock", ports.HeaderDeadLetterTime, got)
	}
}

func TestSettlerFailedAckLeavesOriginalsUnsettled(t *testing.T) {
	b := &fakeBroker{ackErr: errors.New("connection lost")}
	s := kit.NewSettler(b)
	ds := deliveries(2)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}); err == nil {
		t.Fatal("Settle succeeded although Ack failed")
	}
	if state(ds[0]) != kit.Out || state(ds[1]) != kit.Out {
		t.Fatal("a failed ack must leave the deliveries out")
	}
}

func TestSettlerDetectsAlreadyCompletedAndConflict(t *testing.T) {
	b := &fakeBroker{}
	s := kit.NewSettler(b)
	ds := deliveries(2)
	ctx := context.Background()
	if err := s.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrAlreadyCompleted) {
		t.Fatalf("second ack = %v, want ErrAlreadyCompleted", err)
	}
	if err := s.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Requeue}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("requeue after ack = %v, want ErrConflict", err)
	}
	// A batch with one settled member settles nothing and leaves the rest out.
	if err := s.Settle(ctx, []*ports.Delivery{ds[1], ds[0]}, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrAlreadyCompleted) {
		t.Fatalf("batch with a settled member = %v", err)
	}
	if state(ds[1]) != kit.Out {
		t.Fatalf("the unsettled member is %v, want out", state(ds[1]))
	}
	if len(b.acks) != 1 {
		t.Fatalf("%d ack calls, want 1", len(b.acks))
	}
}

func TestSettlerConcurrentSettleOfOneDeliverySettlesOnce(t *testing.T) {
	b := &fakeBroker{}
	s := kit.NewSettler(b)
	ds := deliveries(1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 1 || len(b.acks) != 1 {
		t.Fatalf("%d Settle calls succeeded, %d acks; want 1 and 1", ok, len(b.acks))
	}
}

func TestSettlerRejectsForeignHandleAndBadDisposition(t *testing.T) {
	s := kit.NewSettler(&fakeBroker{})
	ctx := context.Background()
	foreign := []*ports.Delivery{{ID: "x", Handle: 42}}
	if err := s.Settle(ctx, foreign, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("foreign handle = %v, want ErrInvalid", err)
	}
	if err := s.Settle(ctx, deliveries(1), ports.Disposition{Action: 99}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("unknown action = %v, want ErrInvalid", err)
	}
	if err := s.Settle(ctx, deliveries(1), ports.Disposition{Action: ports.Requeue, Delay: -1}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("negative delay = %v, want ErrInvalid", err)
	}
	if err := s.Settle(ctx, nil, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("empty batch = %v", err)
	}
}

type nativeBroker struct {
	fakeBroker
	requeued, deadLettered int
}

func (b *nativeBroker) Requeue(_ context.Context, ds []*ports.Delivery, _ time.Duration) error {
	b.requeued += len(ds)
	return nil
}

func (b *nativeBroker) DeadLetter(_ context.Context, ds []*ports.Delivery, _ ports.Disposition) error {
	b.deadLettered += len(ds)
	return nil
}

// settler returns a Settler with b's native requeue and dead letter.
func (b *nativeBroker) settler() *kit.Settler {
	s := kit.NewSettler(b)
	s.Requeue, s.DeadLetter = b.Requeue, b.DeadLetter
	return s
}

func TestSettlerPrefersNativeRequeueAndDeadLetter(t *testing.T) {
	b := &nativeBroker{}
	s := b.settler()
	ctx := context.Background()
	if err := s.Settle(ctx, deliveries(2), ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, deliveries(3), ports.Disposition{Action: ports.DeadLetter}); err != nil {
		t.Fatal(err)
	}
	if b.requeued != 2 || b.deadLettered != 3 || len(b.published) != 0 || len(b.acks) != 0 {
		t.Fatalf("requeued %d, dead-lettered %d, published %d, acks %d", b.requeued, b.deadLettered, len(b.published), len(b.acks))
	}
}

// A broker that stops delivering a message after DeliveryLimit
// deliveries gets a counted copy of each delivery at the limit (and an
// ack of the original) instead of its native requeue; the others are
// requeued natively.
func TestSettlerCopiesWhatReachedTheDeliveryLimit(t *testing.T) {
	b := &nativeBroker{}
	s := b.settler()
	s.DeliveryLimit = 3
	ds := deliveries(4)
	for i, n := range []int{0, 2, 1, 5} { // deliveries 1, 3, 2 and 6
		ds[i].RedeliveryCount = n
	}
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	if b.requeued != 2 || len(b.published) != 2 || len(b.acks) != 1 || len(b.acks[0]) != 2 || b.acks[0][0] != "m1" || b.acks[0][1] != "m3" {
		t.Fatalf("requeued %d natively, published %d copies, acked %v: want m0 and m2 requeued, m1 and m3 copied and acked", b.requeued, len(b.published), b.acks)
	}
	if got := b.published[0].Headers.Get(ports.HeaderRedeliveryCount) + "," + b.published[1].Headers.Get(ports.HeaderRedeliveryCount); got != "3,6" {
		t.Fatalf("the copies count %s redeliveries, want 3,6", got)
	}
	for _, d := range ds {
		if state(d) != kit.Done {
			t.Fatalf("%s is %v after the requeue, want Done", d.ID, state(d))
		}
	}
}

func TestCopiesHeaderRules(t *testing.T) {
	d := deliveries(1)[0]
	d.Headers.Set(kit.HeaderNotBefore, "1")
	r := kit.RequeueCopy(d, 0)
	if _, ok := r.Headers.Lookup(kit.HeaderNotBefore); ok || r.Delay != 0 {
		t.Fatal("an undelayed requeue must drop a stale not-before")
	}
	dl := kit.DeadLetterCopy(d, ports.Disposition{Action: ports.DeadLetter}, time.Now())
	if dl.Headers.Get(ports.HeaderDeadLetterReason) != kit.NoReason || dl.Headers.Get(ports.HeaderAttempts) != "3" {
		t.Fatalf("defaults: %v", dl.Headers)
	}
	if _, ok := dl.Headers.Lookup(ports.HeaderRedeliveryCount); ok {
		t.Fatal("the dead-letter copy must not carry the redelivery count")
	}
	h := ports.NewHeaders(kit.HeaderNotBefore, "1700000000000")
	at, err := kit.TakeNotBefore(&h)
	if err != nil || at.UnixMilli() != 1700000000000 || len(h) != 0 {
		t.Fatalf("TakeNotBefore = %v, %v, %v", at, err, h)
	}
	bad := ports.NewHeaders(kit.HeaderNotBefore, "soon")
	if _, err := kit.TakeNotBefore(&bad); !ports.IsPoison(err) {
		t.Fatalf("malformed not-before = %v, want poison", err)
	}
}

func TestSettlerHeldRequeueKeepsOriginalUnackedUntilTheCopyIsPublished(t *testing.T) {
	b := &fakeBroker{}
	d := kit.NewDelayer(kit.DelayerOptions{})
	defer d.Stop()
	s := &kit.Settler{Broker: b, Delayer: d}
	ds := deliveries(2)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Requeue, Delay: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	early := len(b.acks) + len(b.published)
	b.mu.Unlock()
	if early != 0 {
		t.Fatal("a held requeue published or acked before its delay")
	}
	if state(ds[0]) != kit.Settling {
		t.Fatalf("held delivery is %v, want settling", state(ds[0]))
	}
	if err := s.Settle(context.Background(), ds[:1], ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("ack of a held requeue = %v, want ErrConflict", err)
	}
	deadline := time.Now().Add(wait)
	for state(ds[1]) != kit.Done {
		if time.Now().After(deadline) {
			t.Fatal("held requeue not completed within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.published) != 2 || len(b.acks) != 1 {
		t.Fatalf("published %d, ack calls %d; want 2 and 1", len(b.published), len(b.acks))
	}
	if b.published[0].Delay != 0 || b.published[0].Headers.Get(ports.HeaderRedeliveryCount) != "3" {
		t.Fatalf("held copy = %+v, want no delay left and count 3", b.published[0])
	}
}

func TestSettlerHeldRequeueDroppedByStopLeavesOriginalUnacked(t *testing.T) {
	b := &fakeBroker{}
	d := kit.NewDelayer(kit.DelayerOptions{})
	s := &kit.Settler{Broker: b, Delayer: d}
	ds := deliveries(1)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Requeue, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n := d.Stop(); n != 1 {
		t.Fatalf("Stop cancelled %d, want 1", n)
	}
	if len(b.acks) != 0 || len(b.published) != 0 {
		t.Fatal("Stop must not ack or publish a held requeue")
	}
	if err := s.Settle(context.Background(), deliveries(1), ports.Disposition{Action: ports.Requeue, Delay: time.Hour}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("held requeue after the Delayer stopped = %v, want ErrClosed", err)
	}
}

func TestSettlerHeldRequeueRetriesAFailedPublish(t *testing.T) {
	b := &fakeBroker{failPub: map[int]error{0: ports.ErrUnconfirmed}}
	d := kit.NewDelayer(kit.DelayerOptions{})
	defer d.Stop()
	failed := make(chan error, 8)
	s := &kit.Settler{Broker: b, Delayer: d, OnError: func(err error) {
		b.mu.Lock()
		b.failPub = nil // the broker recovers
		b.mu.Unlock()
		failed <- err
	}}
	ds := deliveries(1)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Requeue, Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, ports.ErrUnconfirmed) {
			t.Fatalf("reported %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the failed held requeue was not reported")
	}
	deadline := time.Now().Add(wait)
	for state(ds[0]) != kit.Done {
		if time.Now().After(deadline) {
			t.Fatal("held requeue not retried to completion within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNotBeforeRoundsUp(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000).Add(time.Microsecond)
	h := ports.Headers{}
	kit.SetNotBefore(&h, at)
	got, err := kit.TakeNotBefore(&h)
	if err != nil || got.Before(at) || got.Sub(at) > time.Millisecond {
		t.Fatalf("round trip of %v = %v, %v", at, got, err)
	}
}
