package pulsar_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/ports"
)

// Open performs the CONNECT handshake; a broker without authentication
// (pulsartest by default) accepts any credentials, as Pulsar with
// authenticationEnabled=false does.
func TestOpenPulsar(t *testing.T) {
	ctx := context.Background()
	addr := strings.TrimPrefix(startPlain(t).URL(), "pulsar://")
	for _, raw := range []string{
		"pulsar://" + addr,
		"pulsar://" + addr + "/acme/billing?namespace=svc&send_timeout=5s&requeue_tick=30ms",
		"pulsar://u:s3cret@" + addr + "/",
		"pulsar://" + addr + "/?token=t0ken",
	} {
		var logs opentest.LogBuffer
		a, err := adapters.Open(ctx, raw, adapters.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		if _, ok := adapters.Unwrap(a).(*pulsar.Adapter); !ok || a.Name() != "pulsar" {
			t.Errorf("Open(%q) = %T %q", raw, adapters.Unwrap(a), a.Name())
		}
		if out := logs.String(); strings.Contains(out, "s3cret") || strings.Contains(out, "t0ken") || !strings.Contains(out, "native-dlq") {
			t.Errorf("start-up log for %q: %s", raw, out)
		}
		opentest.Close(t, a)
	}
}

func TestOpenPulsarRejects(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"pulsar://":                             "pulsar:// needs a broker address",
		"pulsar://h:6650/only-tenant/ns/extra":  "is not /tenant/namespace",
		"pulsar://h:6650/bad tenant/ns":         "pulsar.Options.Namespace",
		"pulsar://h:6650/t%20x/ns":              "pulsar.Options.Namespace",
		"pulsar://h:6650?send_timeout=forever":  `parameter send_timeout: "forever" is not a duration`,
		"pulsar://h:6650?requeue_tick=1ms":      "parameter requeue_tick",
		"pulsar://h:6650?topic=x":               "parameter topic: unknown for pulsar:// (accepted: namespace, inflight, max_attempts, backoff, max_backoff",
		"pulsar://u:s3cret@h:6650?token=t0ken":  "give a token or a user name and password, not both",
		"pulsar://h:6650?namespace=has%20space": "pulsar.Options.TopicPrefix",
	} {
		a, err := adapters.Open(ctx, raw)
		if err == nil {
			opentest.Close(t, a)
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want ErrInvalid saying %q", raw, err, want)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "t0ken") {
			t.Errorf("error shows a secret: %v", err)
		}
	}
	if _, err := adapters.Open(ctx, "pulsar://h:6650", adapters.WithTLS(&tls.Config{})); err == nil || !strings.Contains(err.Error(), "use pulsar+ssl://") {
		t.Errorf("WithTLS on pulsar:// = %v", err)
	}
}

// An unreachable broker fails Open at once, naming the address and what
// to check (it used to open and let every Send and Start wait out their
// timeouts).
func TestOpenUnreachableFailsWithinConnectTimeout(t *testing.T) {
	start := time.Now()
	a, err := adapters.Open(context.Background(), "pulsar://127.0.0.1:1?connect_timeout=300ms", adapters.NotExclusive())
	if err == nil {
		_ = a.Close(context.Background())
		t.Fatal("Open of pulsar://127.0.0.1:1 succeeded")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("Open took %v with a 300ms connect timeout", took)
	}
	if !errors.Is(err, ports.ErrRefused) || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "check") {
		t.Fatalf("Open = %v, want ports.ErrRefused naming 127.0.0.1:1 and what to check", err)
	}
}
