package adapters_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// fakeAdapter is an adapter with chosen capabilities that does nothing.
type fakeAdapter struct{ caps ports.Capabilities }

func (fakeAdapter) Name() string                                 { return "fake" }
func (f fakeAdapter) Capabilities() ports.Capabilities           { return f.caps }
func (fakeAdapter) Send(context.Context, ...ports.Message) error { return nil }
func (fakeAdapter) Close(context.Context) error                  { return nil }
func (fakeAdapter) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return nil, ports.ErrUnsupported
}

// seen is what the fake opener was given, for the test to inspect.
var seen struct {
	u        *url.URL
	cfg      *adapters.Config
	region   string
	verbose  bool
	interval time.Duration
}

func init() {
	open := adapters.OpenerFunc(func(_ context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		seen.u, seen.cfg = u, cfg
		seen.region = cfg.Params.String("region", "eu")
		seen.verbose = cfg.Params.Bool("verbose", false)
		seen.interval = cfg.Params.Duration("interval", time.Second, time.Millisecond, time.Minute)
		_ = cfg.Params.String("token", "")
		if err := cfg.Params.Err("region", "verbose", "interval", "token"); err != nil {
			return nil, err
		}
		if u.Scheme == "fakeq" {
			if err := cfg.PlainOnly("fakeqs"); err != nil {
				return nil, err
			}
		}
		return fakeAdapter{caps: ports.Capabilities{PublisherConfirm: false, Broadcast: true, DurableGroups: true,
			PerMessageAck: true, ExactRedeliveryCount: true, Ordering: ports.OrderPerKey}}, nil
	})
	adapters.Register("fakeq", open)
	adapters.Register("FakeQS", open) // schemes are case-insensitive
}

func TestOpenerGetsValidatedConfig(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	a, err := adapters.Open(ctx, "FAKEQS://alice:s3cret@broker.example:5671/vhost?region=us&verbose=true&interval=250ms&token=t0ken&namespace=billing&max_attempts=7",
		adapters.WithLogger(logs.Logger()), adapters.NotExclusive())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer closeAdapter(t, a)

	if seen.u.String() != "fakeqs://broker.example:5671/vhost" {
		t.Errorf("opener URL = %q, want it without user info and query", seen.u)
	}
	c := seen.cfg
	if c.Scheme != "fakeqs" || c.Username != "alice" || c.Password != "s3cret" || !c.HasCredentials || c.Namespace != "billing" {
		t.Errorf("config = scheme %q user %q credentials %v namespace %q", c.Scheme, c.Username, c.HasCredentials, c.Namespace)
	}
	if seen.region != "us" || !seen.verbose || seen.interval != 250*time.Millisecond {
		t.Errorf("scheme params = %q %v %v", seen.region, seen.verbose, seen.interval)
	}
	if c.InFlight != ports.DefaultInFlight || c.Retry.MaxAttempts != 7 {
		t.Errorf("defaults = inflight %d retry %+v", c.InFlight, c.Retry)
	}
	if tc := c.TLS(); tc.ServerName != "broker.example" || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("default TLS = server %q min %x", tc.ServerName, tc.MinVersion)
	}

	out := logs.String()
	for _, secret := range []string{"s3cret", "t0ken"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows a secret %q:\n%s", secret, out)
		}
	}
	recs := logs.Records(t)
	if len(recs) < 2 || recs[0]["level"] != "INFO" {
		t.Fatalf("want the Info start-up line then warnings, got:\n%s", out)
	}
	if u := recs[0]["url"]; u != "fakeqs://alice:xxxxx@broker.example:5671/vhost?interval=250ms&max_attempts=7&namespace=billing&region=us&token=xxxxx&verbose=true" {
		t.Errorf("logged url = %v", u)
	}
	var warned []string
	for _, r := range recs[1:] {
		if r["level"] != "WARN" {
			t.Errorf("unexpected record %v", r)
		}
		warned = append(warned, r["capability"].(string))
	}
	if strings.Join(warned, ",") != "confirm" {
		t.Errorf("warnings for %v, want one for the missing publisher confirm", warned)
	}
}

func TestOpenerParamErrors(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"fakeq://h/?verbose=maybe":            `parameter verbose: "maybe" is not true or false`,
		"fakeq://h/?interval=2h":              `parameter interval: "2h" is not a duration within 1ms..1m0s`,
		"fakeq://h/?colour=red&size=2":        "parameter colour, size: unknown for fakeq:// (accepted: namespace, inflight, max_attempts, backoff, max_backoff, region, verbose, interval, token; and where they apply password_file, password_env, ca_file, cert_file, key_file, server_name, insecure)",
		"fakeq://u:s3cret@h/?password=s3cret": "parameter password: unknown",
	} {
		_, err := adapters.Open(ctx, raw, adapters.NotExclusive())
		if err == nil || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want an ErrInvalid saying %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error shows a secret: %v", err)
		}
	}
	_, err := adapters.Open(ctx, "fakeq://h/", adapters.WithTLS(&tls.Config{}), adapters.NotExclusive())
	if err == nil || !strings.Contains(err.Error(), "use fakeqs://") {
		t.Errorf("TLS on the plaintext scheme = %v", err)
	}
	a, err := adapters.Open(ctx, "fakeqs://h/", adapters.WithTLS(&tls.Config{MinVersion: tls.VersionTLS13}), adapters.WithCredentials("bob", "pw"), adapters.NotExclusive(),
		adapters.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("TLS scheme with WithTLS: %v", err)
	}
	defer closeAdapter(t, a)
	if tc := seen.cfg.TLS(); tc.MinVersion != tls.VersionTLS13 || tc.ServerName != "h" {
		t.Errorf("WithTLS config = min %x server %q", tc.MinVersion, tc.ServerName)
	}
	if seen.cfg.Username != "bob" || seen.cfg.Password != "pw" {
		t.Errorf("WithCredentials = %q", seen.cfg.Username)
	}
}

// Without WithLogger only warnings are logged, to slog.Default().
func TestDefaultLoggerPassesOnlyWarnings(t *testing.T) {
	var logs logBuffer
	prev := slog.Default()
	slog.SetDefault(logs.Logger())
	defer slog.SetDefault(prev)

	a, err := adapters.Open(context.Background(), "fakeq://h/", adapters.NotExclusive())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAdapter(t, a)
	recs := logs.Records(t)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["capability"] != "confirm" {
		t.Fatalf("default logging = %v, want only the missing-confirm warning", recs)
	}
}

// An opener's error that quotes a secret is scrubbed before it is shown.
func TestOpenerErrorsAreScrubbed(t *testing.T) {
	adapters.Register("leaky", adapters.OpenerFunc(func(_ context.Context, _ *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		tok := cfg.Params.String("api_token", "")
		return nil, fmt.Errorf("%w: dial amqp://%s:%s@h failed (token %s)", ports.ErrUnsupported, cfg.Username, cfg.Password, tok)
	}))
	_, err := adapters.Open(context.Background(), "leaky://bob:hunter2@h/?api_token=abc123", adapters.NotExclusive())
	if err == nil || !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("Open = %v, want the opener's error", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "abc123") || !strings.Contains(err.Error(), "bob:xxxxx@h") {
		t.Fatalf("error not scrubbed: %v", err)
	}
}
