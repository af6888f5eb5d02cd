package kit

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicemq/sluice/ports"
	"math/rand/v2"
	"syscall"
	"time"
)

// Backoff is an exponential backoff policy with jitter. The zero value
// uses the defaults of each field.
type Backoff struct {
	// Initial is the first delay (default 100ms).
	Initial time.Duration
	// Max caps every delay (default 30s).
	Max time.Duration
	// Multiplier grows the delay per attempt (default 2; values below 1
	// are treated as 1).
	Multiplier float64
	// Jitter is the random fraction taken off each delay, 0..1 (default
	// 0.2: a delay is 80..100% of the nominal one), so that many clients
	// do not reconnect in lockstep.
	Jitter float64
}

// DefaultBackoff is the reconnect policy of the adapters in this module.
var DefaultBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}

// Delay returns the delay before retry number attempt (0 for the first
// retry).
func (b Backoff) Delay(attempt int) time.Duration {
	initial, maxD, mult, jitter := b.Initial, b.Max, b.Multiplier, b.Jitter
	if initial <= 0 {
		initial = DefaultBackoff.Initial
	}
	if maxD <= 0 {
		maxD = DefaultBackoff.Max
	}
	if mult == 0 {
		mult = DefaultBackoff.Multiplier
	}
	mult = max(mult, 1)
	if jitter == 0 {
		jitter = DefaultBackoff.Jitter
	}
	jitter = min(max(jitter, 0), 1)
	d := float64(initial)
	for i := 0; i < attempt && d < float64(maxD); i++ {
		d *= mult
	}
	d = min(d, float64(maxD))
	d -= d * jitter * rand.Float64()
	return max(time.Duration(d), time.Millisecond)
}

// Reconnect calls dial until it succeeds, waiting b.Delay(attempt) between
// failures, and returns nil once dial returned nil. Each failure is passed
// to report (nil: not reported) wrapped with the attempt number, so a
// subscription's Errors channel shows the outage. It returns ctx.Err()
// joined with the last dial error when ctx is done first, and stops at
// once (no retry) on an error dial marks with Permanent.
func Reconnect(ctx context.Context, b Backoff, dial func(ctx context.Context) error, report func(error)) error {
	for attempt := 0; ; attempt++ {
		err := dial(ctx)
		if err == nil {
			return nil
		}
		var p *permanentError
		if errors.As(err, &p) {
			return p.err
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		delay := b.Delay(attempt)
		if report != nil {
			report(fmt.Errorf("reconnect attempt %d failed, retrying in %v: %w", attempt+1, delay.Round(time.Millisecond), err))
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		}
	}
}

// Permanent marks err as not worth retrying (bad credentials, a rejected
// configuration): Reconnect returns it at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// DialError reports that a connection could not be made. Its message names
// the address and says what to check.
type DialError struct {
	// Broker names the broker ("RabbitMQ", "MQTT broker").
	Broker string
	// Addr is the address dialled, without credentials.
	Addr string
	// Timeout is the connect timeout that ran out (0: the dial failed
	// before it).
	Timeout time.Duration
	Err     error
}

func (e *DialError) Error() string {
	what := e.Broker
	if what == "" {
		what = "broker"
	}
	if errors.Is(e.Err, ports.ErrTLS) || errors.Is(e.Err, ports.ErrAuth) {
		// The cause is known and says what to do: no generic advice.
		return fmt.Sprintf("connect to %s at %s: %v", what, e.Addr, e.Err)
	}
	if e.Timeout > 0 && errors.Is(e.Err, context.DeadlineExceeded) {
		return fmt.Sprintf("connect to %s at %s: no connection within %v: check that it is running and reachable at that address (host, port, TLS) and that the credentials are right: %v", what, e.Addr, e.Timeout, e.Err)
	}
	if errors.Is(e.Err, ports.ErrRefused) || errors.Is(e.Err, syscall.ECONNREFUSED) {
		// Nothing listens there: TLS and credentials are not the cause.
		return fmt.Sprintf("connect to %s at %s: %v: check that it is running and listens at that host and port", what, e.Addr, e.Err)
	}
	return fmt.Sprintf("connect to %s at %s: %v: check that it is running and reachable at that address (host, port, TLS) and that the credentials are right", what, e.Addr, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// DialTimeout calls dial with ctx bounded by timeout (<= 0: ctx alone) and
// returns its result, or a *DialError naming broker and addr. addr must
// not contain credentials (it goes into the message).
func DialTimeout[T any](ctx context.Context, broker, addr string, timeout time.Duration, dial func(ctx context.Context) (T, error)) (T, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	v, err := dial(ctx)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = errors.Join(ctx.Err(), err)
		}
		var zero T
		return zero, &DialError{Broker: broker, Addr: addr, Timeout: timeout, Err: err}
	}
	return v, nil
}

// Sleep waits d, cut short by ctx (its error) or by done being closed
// (ports.ErrClosed): a backoff that Stop and the caller can end.
func Sleep(ctx context.Context, done <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-done:
		return ports.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}
