package mqtt_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// mqtt+embedded:// runs the MQTT adapter on its in-process development
// broker (mochi-mqtt), so the opener is proven end to end here.
func TestOpenMQTTEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs opentest.LogBuffer
	a, err := adapters.Open(ctx, "mqtt+embedded:///opener?instance=test-1&keep_alive=5s", adapters.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer opentest.Close(t, a)
	if _, ok := adapters.Unwrap(a).(*mqtt.Adapter); !ok || a.Name() != "mqtt" {
		t.Fatalf("Open = %T %q", adapters.Unwrap(a), a.Name())
	}
	if !strings.Contains(logs.String(), `"msg":"sluice: adapter opened"`) {
		t.Errorf("no start-up line: %s", logs.String())
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "greetings", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	if err := flow.Send(ctx, a, "greetings", "hello"); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Payload) != `"hello"` {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenMQTTRejects(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"mqtt://":                             "mqtt:// needs a broker address",
		"mqtt+embedded://somewhere":           "takes no host",
		"mqtt://h:1883/ns?namespace=other":    "given both as the URL path and as the namespace parameter",
		"mqtt://h:1883?receive_maximum=70000": "parameter receive_maximum",
		"mqtt://h:1883?session_expiry=never":  "parameter session_expiry",
		"mqtt://h:1883?qos=2":                 "parameter qos: unknown for mqtt://",
		"mqtt://h:1883/a+b":                   "mqtt.Options.Namespace",
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
	}
	// mqtts:// is supported (tls_test.go proves it against TLS listeners).
	if _, err := adapters.Open(ctx, "mqtts:///ns"); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "needs a broker address") {
		t.Errorf("mqtts:// without a host = %v, want ErrInvalid", err)
	}
	if _, err := adapters.Open(ctx, "mqtt://h:1883", adapters.WithTLS(&tls.Config{})); err == nil || !strings.Contains(err.Error(), "WithTLS") {
		t.Errorf("WithTLS on mqtt:// = %v", err)
	}
}

// An unreachable broker fails Open within the connect timeout, naming the
// address and what to check (it used to block until ctx ended, silently).
func TestOpenUnreachableFailsWithinConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	a, err := adapters.Open(ctx, "mqtt://127.0.0.1:1?connect_timeout=300ms", adapters.NotExclusive())
	if err == nil {
		_ = a.Close(context.Background())
		t.Fatal("Open of mqtt://127.0.0.1:1 succeeded")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("Open took %v with a 300ms connect timeout", took)
	}
	var ce *mqtt.ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "check") {
		t.Fatalf("Open = %v, want a *mqtt.ConnectError naming 127.0.0.1:1 and what to check", err)
	}
}
