package kit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// Every calls f at once and again after at most period (a longer answer is
// cut to period), and Stop returns once no f runs any more.
func TestPeriodicEveryAndStop(t *testing.T) {
	p := kit.NewPeriodic()
	calls := make(chan context.Context, 16)
	p.Every(time.Millisecond, func(ctx context.Context) time.Duration {
		select {
		case calls <- ctx:
		default:
		}
		return time.Hour
	})
	var ctx context.Context
	for range 3 {
		select {
		case ctx = <-calls:
		case <-time.After(10 * time.Second):
			t.Fatal("f was not called again within period")
		}
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("f's context did not end at Stop")
	}
	for len(calls) > 0 {
		<-calls
	}
	if err := p.Stop(context.Background()); err != nil || len(calls) != 0 {
		t.Fatalf("second Stop: %v, %d calls after the first", err, len(calls))
	}
}

// Stop waits for a timer that does not return only as long as its ctx.
func TestPeriodicStopGivesUpWithItsContext(t *testing.T) {
	p := kit.NewPeriodic()
	running, release := make(chan struct{}), make(chan struct{})
	p.Every(time.Hour, func(context.Context) time.Duration {
		close(running)
		<-release
		return 0
	})
	<-running
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended ctx while f runs = %v, want context.Canceled", err)
	}
	close(release)
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after f returned: %v", err)
	}
}
