package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// RegisterBroker makes the checks every broker's opener makes: TLS
// settings on the plaintext scheme, a missing host, and what to check
// after a failed connect unless the configuration is at fault.
func TestRegisterBroker(t *testing.T) {
	ctx := context.Background()
	var openErr error
	var secure bool
	m := adapters.NewMux()
	m.RegisterBroker(adapters.Broker{Scheme: "bq", TLSScheme: "bqs", Example: "bq://127.0.0.1:1",
		Check: func(host string) string { return "a broker listens at " + host },
		Open: func(_ context.Context, _ *url.URL, _ *adapters.Config, s bool) (ports.Adapter, error) {
			secure = s
			return nil, openErr
		}})
	if got := fmt.Sprint(m.Schemes()); got != "[bq bqs]" {
		t.Fatalf("schemes = %s", got)
	}
	if _, err := m.Open(ctx, "bq://h:1/?insecure=true"); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "use bqs://") {
		t.Errorf("TLS settings on bq:// = %v, want a ParamError naming bqs://", err)
	}
	if _, err := m.Open(ctx, "bqs:///"); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "bqs:// needs a broker address, e.g. bq://127.0.0.1:1") {
		t.Errorf("bqs:/// = %v, want the missing address", err)
	}
	openErr = fmt.Errorf("dial: %w", ports.ErrRefused)
	if _, err := m.Open(ctx, "bqs://h:1/"); !errors.Is(err, ports.ErrRefused) || !strings.HasSuffix(err.Error(), "; check that a broker listens at h:1") || !secure {
		t.Errorf("refused = %v (secure %v), want the hint", err, secure)
	}
	for _, e := range []error{ports.ErrInvalid, ports.ErrAuth, ports.ErrTLS, &adapters.PlaintextOnTLSError{Err: errors.New("x")}} {
		openErr = e
		if _, err := m.Open(ctx, "bq://h:1/"); !errors.Is(err, e) || strings.Contains(err.Error(), "check that") || secure {
			t.Errorf("Open failing with %v = %v, want it without the hint", e, err)
		}
	}
}
