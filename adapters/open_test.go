package adapters_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// TestMain checks for leaked goroutines. The schemes' own tests live in
// their adapter packages (adapters/<name>/url_test.go).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type logBuffer = opentest.LogBuffer

func closeAdapter(t *testing.T, a ports.Adapter) { t.Helper(); opentest.Close(t, a) }

func TestOpenMemRoundTripAndLogsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var logs logBuffer
	a, err := adapters.Open(ctx, "mem://?namespace=open-test&inflight=8&max_attempts=3&backoff=10ms&max_backoff=1s", adapters.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer closeAdapter(t, a)
	if a.Name() != "mem" {
		t.Fatalf("Name = %q, want mem", a.Name())
	}
	if _, ok := adapters.Unwrap(a).(*mem.Adapter); !ok {
		t.Fatalf("Unwrap = %T, want *mem.Adapter", adapters.Unwrap(a))
	}
	if got := adapters.URL(a); got != "mem://?backoff=10ms&inflight=8&max_attempts=3&max_backoff=1s&namespace=open-test" {
		t.Errorf("URL = %q", got)
	}

	spec := adapters.Spec(a, ports.SubscriptionSpec{Topic: "greetings", Group: "g"})
	want := ports.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: time.Second}
	if spec.InFlight != 8 || spec.Retry != want {
		t.Fatalf("Spec = InFlight %d Retry %+v, want 8 and %+v", spec.InFlight, spec.Retry, want)
	}
	kept := adapters.Spec(a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 3, Retry: ports.RetryPolicy{MaxAttempts: 9}})
	if kept.InFlight != 3 || kept.Retry.MaxAttempts != 9 || kept.Retry.Backoff != 10*time.Millisecond || kept.Retry.MaxBackoff != time.Second {
		t.Fatalf("Spec = %+v: want the fields set in code kept and the URL's filled in field by field", kept)
	}
	// flow.New applies the URL's defaults by itself: no adapters.Spec needed.
	if got := flow.New(a, ports.SubscriptionSpec{Topic: "t", Group: "g", Retry: ports.RetryPolicy{Backoff: 20 * time.Millisecond}}).Spec(); got.Retry.MaxAttempts != 3 || got.InFlight != 8 || got.Retry.Backoff != 20*time.Millisecond {
		t.Fatalf("flow.New spec = %+v: want max_attempts=3 and inflight=8 from the URL, Backoff 20ms from code", got)
	}

	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := flow.Send(ctx, a, "greetings", "hello"); err != nil {
		t.Fatalf("Send: %v", err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Payload) != `"hello"` {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle: %v", err)
	}

	// The namespace isolates: an adapter of another namespace on the same
	// (default) broker does not see the topic.
	other, err := mem.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAdapter(t, other)
	osub, err := other.Subscribe(ctx, ports.SubscriptionSpec{Topic: "greetings", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if err := flow.Send(ctx, a, "greetings", "again"); err != nil {
		t.Fatal(err)
	}
	if ds, err := sub.Receive(ctx, 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive in namespace: %v, %v", ds, err)
	} else {
		_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack})
	}
	qctx, qcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer qcancel()
	if ds, err := osub.Receive(qctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the default namespace received %v (%v) from namespace open-test", ds, err)
	}

	recs := logs.Records(t)
	if len(recs) != 1 {
		t.Fatalf("want exactly one log record at open, got %d:\n%s", len(recs), logs.String())
	}
	r := recs[0]
	if r["level"] != "INFO" || r["msg"] != "sluice: adapter opened" || r["adapter"] != "mem" {
		t.Errorf("start-up record = %v", r)
	}
	if r["capabilities"] != a.Capabilities().String() {
		t.Errorf("capabilities = %v, want %q", r["capabilities"], a.Capabilities().String())
	}
	fb, _ := r["fallbacks"].(map[string]any)
	if _, ok := fb["ordering"]; !ok || len(fb) != 1 {
		t.Errorf("fallbacks = %v, want only ordering (mem lacks only ordering)", r["fallbacks"])
	}
}

func TestOpenRejectsBadURLsWithClearErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, url string
		opts      []adapters.Option
		want      string // in the error text
	}{
		{"empty", "", nil, "empty URL"},
		{"no scheme", "localhost:5672", nil, "unknown scheme"},
		{"no scheme at all", "just-a-name", nil, "has no scheme"},
		{"malformed", "amqp://user:s3cret@host:port/", nil, "malformed URL"},
		{"unknown scheme", "amqq://host/", nil, `unknown scheme "amqq" (registered: `},
		{"mem with host", "mem://somewhere", nil, "takes no host"},
		{"mem with path", "mem:///x", nil, "takes no host or path"},
		{"unknown param", "mem://?prefetch=10", nil, "parameter prefetch: unknown for mem:// (accepted: namespace, inflight"},
		{"inflight zero", "mem://?inflight=0", nil, `parameter inflight: "0" is not an integer within 1..100000`},
		{"inflight text", "mem://?inflight=lots", nil, `parameter inflight: "lots" is not an integer`},
		{"inflight twice", "mem://?inflight=1&inflight=2", nil, "parameter inflight: given more than once"},
		{"bad backoff", "mem://?backoff=soon", nil, `parameter backoff: "soon" is not a duration`},
		{"attempts zero", "mem://?max_attempts=0", nil, "parameter max_attempts: must be -1 (unbounded) or 1..1000"},
		{"max below backoff", "mem://?backoff=2s&max_backoff=1s", nil, "parameter max_backoff: 1s is shorter than backoff 2s"},
		{"bad namespace", "mem://?namespace=a/b", nil, "WithNamespace"},
		{"mem credentials", "mem://user:s3cret@/", nil, "mem:// takes no user name or password"},
		{"mem credentials option", "mem://", []adapters.Option{adapters.WithCredentials("u", "s3cret")}, "takes no user name or password"},
		{"credentials twice", "mem://u:s3cret@/", []adapters.Option{adapters.WithCredentials("u", "s3cret")}, "given both in the URL and with WithCredentials"},
		{"tls on plaintext", "mem://", []adapters.Option{adapters.WithTLS(&tls.Config{})}, "parameter WithTLS: TLS settings given for the plaintext scheme mem://"},
		{"namespace twice", "mem://?namespace=a", []adapters.Option{adapters.WithNamespace("b")}, "namespace: given both"},
		{"inflight option twice", "mem://?inflight=4", []adapters.Option{adapters.WithInFlight(8)}, "inflight: given both"},
		{"inflight option range", "mem://", []adapters.Option{adapters.WithInFlight(-1)}, "WithInFlight: must be within"},
		{"retry twice", "mem://?max_attempts=3", []adapters.Option{adapters.WithRetry(ports.RetryPolicy{MaxAttempts: 2})}, "retry given both"},
		{"retry invalid", "mem://", []adapters.Option{adapters.WithRetry(ports.RetryPolicy{Jitter: 3})}, "WithRetry: SubscriptionSpec.Retry"},
		{"nil logger", "mem://", []adapters.Option{adapters.WithLogger(nil)}, "WithLogger: logger must not be nil"},
		{"nil option", "mem://", []adapters.Option{nil}, "nil option"},
		{"empty user", "mem://", []adapters.Option{adapters.WithCredentials("", "x")}, "user must not be empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := adapters.Open(ctx, c.url, c.opts...)
			if err == nil {
				closeAdapter(t, a)
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			if !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("error %v does not wrap ports.ErrInvalid", err)
			}
			var ue *adapters.URLError
			if !errors.As(err, &ue) {
				t.Errorf("error %T is not a *URLError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
	// Nothing above may hold the process slot.
	a, err := adapters.Open(ctx, "mem://")
	if err != nil {
		t.Fatalf("Open after failures: %v", err)
	}
	closeAdapter(t, a)
}

func TestOpenHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := adapters.Open(ctx, "mem://"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context = %v", err)
	}
}

func TestOneAdapterPerProcess(t *testing.T) {
	ctx := context.Background()
	first, err := adapters.Open(ctx, "mem://?namespace=first")
	if err != nil {
		t.Fatal(err)
	}
	_, err = adapters.Open(ctx, "mem://")
	if !errors.Is(err, adapters.ErrAlreadyOpen) || !strings.Contains(err.Error(), "mem://?namespace=first") {
		t.Fatalf("second Open = %v, want ErrAlreadyOpen naming the open adapter", err)
	}
	bridge, err := adapters.Open(ctx, "mem://", adapters.NotExclusive())
	if err != nil {
		t.Fatalf("NotExclusive Open: %v", err)
	}
	closeAdapter(t, bridge)
	if _, err := adapters.Open(ctx, "mem://"); !errors.Is(err, adapters.ErrAlreadyOpen) {
		t.Fatalf("closing a non-exclusive adapter freed the slot: %v", err)
	}
	closeAdapter(t, first)
	closeAdapter(t, first) // idempotent, and frees nothing twice
	again, err := adapters.Open(ctx, "mem://")
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	closeAdapter(t, again)
}

func TestRegisterPanicsOnDuplicateAndNil(t *testing.T) {
	for name, f := range map[string]func(){
		"duplicate": func() { adapters.Register("MEM", adapters.OpenerFunc(nil)) },
		"nil":       func() { adapters.Register("x-nil", nil) },
		"empty": func() {
			adapters.Register("", adapters.OpenerFunc(func(context.Context, *url.URL, *adapters.Config) (ports.Adapter, error) { return nil, nil }))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			f()
		}()
	}
	if got := adapters.Schemes(); len(got) == 0 || got[0] > got[len(got)-1] {
		t.Fatalf("Schemes = %v", got)
	}
}
