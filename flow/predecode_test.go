package flow_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// predecodingFake is a subscription that decodes payloads as it fetches
// (ports.Predecoder), as the kafka adapter does on its partitions.
type predecodingFake struct {
	*fakeAdapter
	mu     sync.Mutex
	decode func(payload []byte) any
	asked  chan struct{} // closed by the first Predecode
}

func (f *predecodingFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := f.fakeAdapter.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *predecodingFake) Predecode(decode func(payload []byte) any) {
	f.mu.Lock()
	if f.decode == nil {
		close(f.asked)
	}
	f.decode = decode
	f.mu.Unlock()
}

func (f *predecodingFake) decoder() func(payload []byte) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.decode
}

func TestDecodeOnTheSourceUsesWhatTheSubscriptionDecoded(t *testing.T) {
	f := &predecodingFake{fakeAdapter: newFake(), asked: make(chan struct{})}
	var mu sync.Mutex
	var got []string
	p := flow.New(f, spec)
	flow.Sink(flow.Decode[order](p.Source()), func(_ context.Context, o order) error {
		mu.Lock()
		got = append(got, o.ID)
		mu.Unlock()
		return nil
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	select {
	case <-f.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("Decode on the source did not ask the subscription to predecode within 5s")
	}
	decode := f.decoder()

	// The subscription decoded it: the stage hands that on (the payload
	// itself would not decode).
	pre := delivery(`not json`, 0)
	pre.Decoded = decode([]byte(`{"id":"pre","total":1}`))
	// The subscription could not decode it: poison, with the reason.
	bad := delivery(`{"id":`, 0)
	bad.Decoded = decode(bad.Payload)
	// Fetched before Predecode: the stage decodes it.
	plain := delivery(`{"id":"plain","total":2}`, 0)
	f.push(pre, bad, plain)

	s := f.waitSettled(t, 3)
	for _, x := range s {
		want := ports.Ack
		if x.id == bad.ID {
			want = ports.DeadLetter
			var de *ports.DecodeError
			if !errors.As(x.disp.Reason, &de) {
				t.Fatalf("the undecodable delivery's reason = %v, want a *ports.DecodeError", x.disp.Reason)
			}
		}
		if x.disp.Action != want {
			t.Fatalf("delivery %s settled %v, want %v", x.id, x.disp.Action, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got)
	if !slices.Equal(got, []string{"plain", "pre"}) {
		t.Fatalf("handled %q, want pre and plain", got)
	}
}

func TestDecodeAfterAnotherStageLeavesTheSubscriptionAlone(t *testing.T) {
	f := &predecodingFake{fakeAdapter: newFake(), asked: make(chan struct{})}
	p := flow.New(f, spec)
	all := flow.Filter(p.Source(), func(context.Context, *ports.Delivery) (bool, error) { return true, nil })
	flow.Sink(flow.Decode[order](all), func(context.Context, order) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	f.push(delivery(`{"id":"a","total":1}`, 0))
	f.waitSettled(t, 1) // the receive loop ran
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if f.decoder() != nil {
		t.Fatal("a Decode that is not on the source asked the subscription to predecode")
	}
}
