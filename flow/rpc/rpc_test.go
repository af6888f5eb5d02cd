package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/rpc"
	"github.com/sluicemq/sluice/ports"
)

type sum struct{ A, B int }

func newMem(t *testing.T) *mem.Adapter {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Close(context.Background())
		_ = b.Close(context.Background())
	})
	return a
}

// flakySender fails its first n sends as unconfirmed.
type flakySender struct {
	ports.Sender
	fail atomic.Int64
}

func (f *flakySender) Send(ctx context.Context, msgs ...ports.Message) error {
	if f.fail.Add(-1) >= 0 {
		return &ports.SendError{Topic: msgs[0].Topic, Err: ports.ErrUnconfirmed}
	}
	return f.Sender.Send(ctx, msgs...)
}

func startServer(t *testing.T, a ports.Adapter, replies ports.Sender, h rpc.Handler[sum, int]) (*flow.Pipeline, *rpc.Server) {
	t.Helper()
	sp := ports.SubscriptionSpec{Topic: "sums", Group: "adder", Retry: ports.RetryPolicy{Backoff: time.Millisecond}}
	p := flow.New(a, sp, flow.WithDrainTimeout(0), flow.WithErrorHandler(func(error) {}))
	s := rpc.Serve(p.Source(), replies, h)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = p.Stop(ctx)
	})
	return p, s
}

func startClient(t *testing.T, a ports.Adapter) *rpc.Client[sum, int] {
	t.Helper()
	c := rpc.NewClient[sum, int](a, "sums", rpc.ClientOptions{Timeout: 10 * time.Second})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// A reply the broker did not confirm leaves the request unsettled: it is
// requeued, handled again, and the caller gets one answer.
func TestUnconfirmedReplyRequeuesTheRequest(t *testing.T) {
	a := newMem(t)
	replies := &flakySender{Sender: a}
	replies.fail.Store(1)
	var calls atomic.Int64
	p, s := startServer(t, a, replies, func(_ context.Context, in sum) (int, error) {
		calls.Add(1)
		return in.A + in.B, nil
	})
	c := startClient(t, a)
	got, err := c.Call(context.Background(), sum{A: 2, B: 3})
	if err != nil || got != 5 {
		t.Fatalf("Call = %d, %v; want 5", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitSettled(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Requeued != 1 || st.Acked != 1 {
		t.Fatalf("replier stats %+v: want the request requeued once (unconfirmed reply), then acked", st)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the first reply was not confirmed)", n)
	}
	if ss := s.Stats(); ss.Failed != 1 || ss.Replied != 1 {
		t.Fatalf("server stats %+v, want 1 failed and 1 replied", ss)
	}
	if cs := c.Stats(); cs.Answered != 1 || cs.Duplicate != 0 {
		t.Fatalf("client stats %+v, want one answer", cs)
	}
}

// A request that arrives after its deadline is acked without a reply; a
// retryable handler error requeues it; poison dead-letters it and tells
// the caller at once.
func TestServeDispositions(t *testing.T) {
	a := newMem(t)
	dlq := flow.New(a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("sums"), Group: "ops"}, flow.WithDrainTimeout(0))
	dead := make(chan *ports.Delivery, 4)
	flow.Sink(dlq.Source(), func(_ context.Context, d *ports.Delivery) error { dead <- d; return nil })
	if err := dlq.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dlq.Stop(context.Background()) }()
	var transient atomic.Int64
	p, s := startServer(t, a, a, func(_ context.Context, in sum) (int, error) {
		switch {
		case in.A < 0:
			return 0, ports.Poisonf("negative operand %d", in.A)
		case in.B == 99 && transient.Add(1) == 1:
			return 0, errors.New("cache warming up")
		}
		return in.A + in.B, nil
	})
	c := startClient(t, a)

	_, err := c.Call(context.Background(), sum{A: -1})
	var rerr *rpc.Error
	if !errors.As(err, &rerr) || rerr.Code != rpc.CodeRejected {
		t.Fatalf("poison request: Call = %v, want an *rpc.Error with code %q", err, rpc.CodeRejected)
	}
	select {
	case d := <-dead:
		if d.Headers.Get(rpc.HeaderCorrelation) == "" {
			t.Fatalf("dead-lettered request lost its headers: %v", d.Headers)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poison request was not dead-lettered")
	}

	if got, err := c.Call(context.Background(), sum{A: 1, B: 99}); err != nil || got != 100 {
		t.Fatalf("retried request: Call = %d, %v; want 100", got, err)
	}

	// A request already past its deadline, sent by hand.
	m, _ := flow.NewMessage(context.Background(), "sums", sum{A: 1, B: 1})
	m.Headers.Set(rpc.HeaderReplyTo, string(c.ReplyTopic()))
	m.Headers.Set(rpc.HeaderCorrelation, "expired-1")
	m.Headers.Set(rpc.HeaderDeadline, time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano))
	if err := a.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitSettled(ctx, 4); err != nil {
		t.Fatal(err)
	}
	ss := s.Stats()
	if ss.Rejected != 1 || ss.Failed != 1 || ss.Expired != 1 || ss.Replied != 1 {
		t.Fatalf("server stats %+v, want 1 rejected, 1 failed, 1 expired, 1 replied", ss)
	}
	if st := p.Stats(); st.DeadLettered != 1 || st.Requeued != 1 || st.Acked != 2 {
		t.Fatalf("replier stats %+v, want 1 dead-lettered, 1 requeued, 2 acked", st)
	}
	if cs := c.Stats(); cs.Unknown != 0 {
		t.Fatalf("client stats %+v: an expired request must get no reply", cs)
	}
}

// A call with a deadline and no replier returns a *NoReplyError at the
// deadline; Call before Start and after Close fail loudly.
func TestCallDeadlineAndLifecycle(t *testing.T) {
	a := newMem(t)
	// A group declared ahead keeps the request; nobody answers it.
	if err := ports.DeclareGroup(context.Background(), a, "sums", "adder"); err != nil {
		t.Fatal(err)
	}
	c := rpc.NewClient[sum, int](a, "sums", rpc.ClientOptions{})
	if _, err := c.Call(context.Background(), sum{}); err == nil {
		t.Fatal("Call before Start succeeded")
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, sum{A: 1})
	var nr *rpc.NoReplyError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call without a replier = %v, want a *NoReplyError wrapping DeadlineExceeded", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), sum{}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Call after Close = %v, want ErrClosed", err)
	}
	if st := c.Stats(); st.TimedOut != 1 || st.Calls != 1 {
		t.Fatalf("stats %+v, want 1 call timed out", st)
	}
}

func Example() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)

	// The replier: a pipeline whose terminal stage is rpc.Serve.
	p := flow.New(a, ports.SubscriptionSpec{Topic: "sums", Group: "adder"})
	rpc.Serve(p.Source(), a, func(_ context.Context, in sum) (int, error) {
		if in.A < 0 {
			return 0, rpc.Errorf("invalid", "negative operand %d", in.A)
		}
		return in.A + in.B, nil
	})
	_ = p.Start(ctx)
	defer p.Stop(ctx)

	// The requester.
	c := rpc.NewClient[sum, int](a, "sums", rpc.ClientOptions{})
	_ = c.Start(ctx)
	defer c.Close(ctx)
	got, err := c.Call(ctx, sum{A: 2, B: 40})
	fmt.Println(got, err)
	_, err = c.Call(ctx, sum{A: -1})
	fmt.Println(err)
	// Output:
	// 42 <nil>
	// rpc: invalid: negative operand -1
}
