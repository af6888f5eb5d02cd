package flow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// A profile fills the prefetch and batch window the spec leaves zero; the
// spec's own values win.
func TestProfileFillsOnlyUnsetSpecFields(t *testing.T) {
	for _, tc := range []struct {
		profile flow.Profile
		spec    ports.SubscriptionSpec
		in      int
		window  time.Duration
	}{
		{flow.ProfileLatency, spec, 32, 5 * time.Millisecond},
		{flow.ProfileThroughput, spec, 512, 250 * time.Millisecond},
		{flow.ProfileThroughput, withInFlight(spec, 7, 20*time.Millisecond), 7, 20 * time.Millisecond},
		{flow.ProfileDefault, spec, ports.DefaultInFlight, 0},
	} {
		p := flow.New(newFake(), tc.spec, flow.WithProfile(tc.profile))
		if got := p.Spec(); got.InFlight != tc.in || got.Batch.Window != tc.window {
			t.Errorf("%v on InFlight %d: Spec() InFlight %d window %v, want %d and %v", tc.profile, tc.spec.InFlight, got.InFlight, got.Batch.Window, tc.in, tc.window)
		}
	}
}

func withInFlight(s ports.SubscriptionSpec, n int, window time.Duration) ports.SubscriptionSpec {
	s.InFlight, s.Batch.Window = n, window
	return s
}

// ProfileLatency runs 32 Sink workers: 32 deliveries are handled at once
// (each handler waits for all the others). A Sink's own Workers wins.
func TestProfileSetsSinkWorkersUnlessTheSinkSaysOtherwise(t *testing.T) {
	run := func(t *testing.T, opts []flow.StageOption, want int) {
		f := newFake()
		p := flow.New(f, spec, flow.WithProfile(flow.ProfileLatency), flow.WithDrainTimeout(0))
		var (
			mu      sync.Mutex
			running int
			most    int
		)
		all := make(chan struct{})
		var once sync.Once
		flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
			mu.Lock()
			running++
			most = max(most, running)
			if running == want {
				once.Do(func() { close(all) })
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}, opts...)
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.push(deliveries(64)...)
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			mu.Lock()
			t.Errorf("only %d handlers ran at once within 5s, want %d", most, want)
			mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil && !errors.As(err, new(*flow.AbandonedError)) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if most > want {
			t.Errorf("%d handlers ran at once, want at most %d", most, want)
		}
	}
	t.Run("profile", func(t *testing.T) { run(t, nil, 32) })
	t.Run("explicit", func(t *testing.T) { run(t, []flow.StageOption{flow.Workers(3)}, 3) })
}

// An unknown profile fails Start with ErrInvalid.
func TestUnknownProfileFailsStart(t *testing.T) {
	p := flow.New(newFake(), spec, flow.WithProfile(flow.Profile(9)))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Start with Profile(9) = %v, want ErrInvalid", err)
	}
}
