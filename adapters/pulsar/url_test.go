package pulsar_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/ports"
)

// The Pulsar adapter connects lazily, so opening needs no broker.
func TestOpenPulsar(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"pulsar://127.0.0.1:6650",
		"pulsar://127.0.0.1:6650/acme/billing?namespace=svc&send_timeout=5s&requeue_tick=30ms",
		"pulsar://u:s3cret@127.0.0.1:6650/",
		"pulsar+ssl://127.0.0.1:6651/?token=t0ken",
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
		"pulsar://h:6650/bad tenant/ns":         "pulsar.WithNamespace",
		"pulsar://h:6650/t%20x/ns":              "pulsar.WithNamespace",
		"pulsar://h:6650?send_timeout=forever":  `parameter send_timeout: "forever" is not a duration`,
		"pulsar://h:6650?requeue_tick=1ms":      "parameter requeue_tick",
		"pulsar://h:6650?topic=x":               "parameter topic: unknown for pulsar:// (accepted: namespace, inflight, max_attempts, backoff, max_backoff, send_timeout, operation_timeout, requeue_tick, token)",
		"pulsar://u:s3cret@h:6650?token=t0ken":  "give a token or a user name and password, not both",
		"pulsar://h:6650?namespace=has%20space": "pulsar.WithTopicPrefix",
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
