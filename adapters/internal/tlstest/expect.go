package tlstest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
)

// Refusal is one connection that Open must refuse: which URL, why, and
// how the error must say it.
type Refusal struct {
	// Name names the subtest ("wrong CA").
	Name string
	// URL is opened with adapters.Open, with Options, a capturing logger
	// and adapters.NotExclusive.
	URL     string
	Options []adapters.Option
	// Is, when set, must hold for the error (errors.Is): adapters.ErrTLS,
	// adapters.ErrAuth, ports.ErrInvalid.
	Is error
	// Want are texts the error must contain, each of them (the words that
	// say which check failed: "unknown authority", "expired").
	Want []string
	// WantAny are texts of which the error must contain at least one, for
	// a refusal whose form depends on timing: a broker that refuses a
	// client certificate sends a TLS alert, but when it also resets the
	// connection the client may see the reset first.
	WantAny []string
	// Secrets must appear neither in the error nor in any log line.
	Secrets []string
}

// ExpectRefused runs each refusal as a subtest: Open must fail within
// connectTimeout (plus a margin for a loaded machine), with an error that
// satisfies Is and contains every Want, and with no Secret in the error or
// the logs. Open is given twice the timeout as its context, so an Open
// that hangs past its own connect timeout is caught, not hidden.
func ExpectRefused(t *testing.T, connectTimeout time.Duration, refusals ...Refusal) {
	t.Helper()
	for _, r := range refusals {
		t.Run(r.Name, func(t *testing.T) {
			var logs opentest.LogBuffer
			opts := append(append([]adapters.Option(nil), r.Options...), adapters.WithLogger(logs.Logger()), adapters.NotExclusive())
			ctx, cancel := context.WithTimeout(context.Background(), 2*connectTimeout+5*time.Second)
			defer cancel()
			start := time.Now()
			a, err := adapters.Open(ctx, r.URL, opts...)
			took := time.Since(start)
			if err == nil {
				opentest.Close(t, a)
				t.Fatalf("Open(%s) succeeded; want it refused (%s)", r.Name, strings.Join(r.Want, ", "))
			}
			t.Logf("Open refused after %v: %v", took.Round(time.Millisecond), err)
			if limit := connectTimeout + connectTimeout/2 + 2*time.Second; took > limit {
				t.Errorf("Open took %v to fail; want it within the connect timeout %v (limit %v with the margin): no hang, no hidden retries", took, connectTimeout, limit)
			}
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				t.Errorf("Open ran into the test's own deadline: it does not bound itself by its connect timeout")
			}
			if r.Is != nil && !errors.Is(err, r.Is) {
				t.Errorf("errors.Is(err, %v) = false; want true for: %v", r.Is, err)
			}
			for _, w := range r.Want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			if len(r.WantAny) > 0 && !slices.ContainsFunc(r.WantAny, func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Errorf("error says none of %q: %v", r.WantAny, err)
			}
			NoSecrets(t, err.Error(), &logs, r.Secrets...)
		})
	}
}

// NoSecrets fails t when any secret appears in text or in a log line.
func NoSecrets(t testing.TB, text string, logs *opentest.LogBuffer, secrets ...string) {
	t.Helper()
	var logged string
	if logs != nil {
		logged = logs.String()
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(text, s) {
			t.Errorf("the secret %q appears in the error: %s", s, text)
		}
		if strings.Contains(logged, s) {
			t.Errorf("the secret %q appears in the logs: %s", s, logged)
		}
	}
}
