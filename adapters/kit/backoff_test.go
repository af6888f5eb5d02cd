package kit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := kit.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, Multiplier: 2, Jitter: 0.5}
	for attempt, nominal := range []time.Duration{10, 20, 40, 80, 80, 80} {
		nominal *= time.Millisecond
		for range 50 {
			d := b.Delay(attempt)
			if d > nominal || d < nominal/2 {
				t.Fatalf("Delay(%d) = %v, want %v..%v", attempt, d, nominal/2, nominal)
			}
		}
	}
	if d := (kit.Backoff{}).Delay(1000); d > kit.DefaultBackoff.Max {
		t.Fatalf("zero Backoff Delay(1000) = %v exceeds the default max", d)
	}
}

func TestReconnectRetriesAndReports(t *testing.T) {
	n := 0
	var reported []error
	err := kit.Reconnect(context.Background(), kit.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("refused")
		}
		return nil
	}, func(err error) { reported = append(reported, err) })
	if err != nil || n != 3 || len(reported) != 2 {
		t.Fatalf("err %v, dials %d, reported %d; want nil, 3, 2", err, n, len(reported))
	}
	if !strings.Contains(reported[0].Error(), "refused") {
		t.Fatalf("report %q does not carry the dial error", reported[0])
	}
}

func TestReconnectStopsOnContextAndPermanent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := kit.Reconnect(ctx, kit.Backoff{Initial: time.Hour}, func(context.Context) error {
		calls++
		cancel()
		return errors.New("refused")
	}, nil)
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Reconnect = %v after %d dials, want Canceled after 1", err, calls)
	}
	bad := errors.New("bad credentials")
	err = kit.Reconnect(context.Background(), kit.Backoff{}, func(context.Context) error { return kit.Permanent(bad) }, nil)
	if err != bad {
		t.Fatalf("Reconnect = %v, want the permanent error unwrapped", err)
	}
}

func TestDialTimeoutNamesAddressAndWhatToCheck(t *testing.T) {
	_, err := kit.DialTimeout(context.Background(), "RabbitMQ", "127.0.0.1:1", 10*time.Millisecond, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	var de *kit.DialError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DialTimeout = %v, want a *DialError wrapping DeadlineExceeded", err)
	}
	for _, want := range []string{"RabbitMQ", "127.0.0.1:1", "10ms", "check"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not mention %q", err, want)
		}
	}
	v, err := kit.DialTimeout(context.Background(), "x", "a", time.Second, func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatal(v, err)
	}
}
