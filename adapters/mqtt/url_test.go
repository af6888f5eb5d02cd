package mqtt_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
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
// broker, so the opener is proven end to end here.
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

// A refused connection (nothing listens on the port) fails Open at once
// with ports.ErrRefused, naming the address — not after the connect
// timeout (10s by default), and without a TLS label.
func TestOpenRefusedFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	took, err := opentest.OpenFails(t, "mqtt://"+addr)
	if took > 5*time.Second {
		t.Fatalf("Open took %v to fail on a refused connection; want at once, not the connect timeout", took)
	}
	if !errors.Is(err, ports.ErrRefused) || errors.Is(err, ports.ErrTLS) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open = %v, want ports.ErrRefused naming %s", err, addr)
	}
}

// A plaintext URL pointed at a port that does not speak MQTT fails
// without a TLS label: only an mqtts:// connection has a TLS handshake to
// fail. The error still hints at the TLS port.
func TestOpenNonMQTTPortIsNotTLS(t *testing.T) {
	addr := opentest.Peer(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 512))
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
	})
	_, err := opentest.OpenFails(t, "mqtt://"+addr+"?connect_timeout=1s")
	if errors.Is(err, ports.ErrTLS) || errors.Is(err, adapters.ErrTLS) || strings.Contains(err.Error(), "TLS handshake failed") {
		t.Fatalf("Open of a plaintext non-MQTT port = %v; want no TLS label on an mqtt:// URL", err)
	}
	if !strings.Contains(err.Error(), "not a plaintext port?") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open = %v, want the address and the hint about a TLS port", err)
	}
}
