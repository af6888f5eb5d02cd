package amqp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// amqp:// against a private RabbitMQ node the test starts (skipped when
// RabbitMQ is not installed, a failure with CI=true). The credentials go
// through WithCredentials and never show in the log.
func TestOpenAMQP(t *testing.T) {
	node := rabbittest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nu, err := url.Parse(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	user := nu.User.Username()
	pass, _ := nu.User.Password()
	var logs opentest.LogBuffer
	raw := "amqp://" + nu.Host + nu.EscapedPath() + "?namespace=opener&queue_type=classic&heartbeat=5s&delay_granularity=0.1"
	a, err := adapters.Open(ctx, raw, adapters.WithCredentials(user, pass), adapters.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	defer opentest.Close(t, a)
	if _, ok := adapters.Unwrap(a).(*amqp.Adapter); !ok || a.Name() != "amqp" {
		t.Fatalf("Open = %T %q", adapters.Unwrap(a), a.Name())
	}
	if a.Capabilities().ExactRedeliveryCount {
		t.Errorf("queue_type=classic did not reach the adapter: %v", a.Capabilities())
	}
	if out := logs.String(); !strings.Contains(out, `"msg":"sluice: adapter opened"`) || (pass != "" && strings.Contains(out, ":"+pass+"@")) {
		t.Errorf("start-up log: %s", out)
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

	// A wrong password is refused by the broker; the error does not show it.
	_, err = adapters.Open(ctx, "amqp://"+nu.Host+"/?dial_timeout=5s", adapters.WithCredentials(user, "n0t-the-password"), adapters.NotExclusive())
	if err == nil || strings.Contains(err.Error(), "n0t-the-password") {
		t.Errorf("wrong password: %v", err)
	}
}

func TestOpenAMQPRejects(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"amqp://":                             "amqp:// needs a broker address",
		"amqp://h:5672/?queue_type=stream":    `parameter queue_type: "stream" is not quorum or classic`,
		"amqp://h:5672/?heartbeat=0s":         "parameter heartbeat",
		"amqp://h:5672/?delay_granularity=2":  "parameter delay_granularity",
		"amqp://h:5672/?prefetch=10":          "parameter prefetch: unknown for amqp://",
		"amqp://h:5672/?namespace=bad%20name": "amqp.Options.Namespace",
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
	if _, err := adapters.Open(ctx, "amqp://h:5672/", adapters.WithTLS(&tls.Config{})); err == nil || !strings.Contains(err.Error(), "use amqps://") {
		t.Errorf("WithTLS on amqp:// = %v", err)
	}
}

// An unreachable broker fails Open at once, naming the address and what
// to check.
func TestOpenUnreachableNamesAddressAndWhatToCheck(t *testing.T) {
	took, err := opentest.OpenFails(t, "amqp://127.0.0.1:1/?dial_timeout=1s")
	if took > 15*time.Second {
		t.Fatalf("Open took %v with a 1s dial timeout", took)
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "check that RabbitMQ listens") {
		t.Fatalf("Open = %v, want the address and what to check", err)
	}
}

// A plaintext client whose handshake gets an answer that is AMQP but not
// connection.start (amqp091's "unexpected command received", which a TLS
// listener's answer can become on a loaded machine) is told the port may
// be a TLS one, as for a close or an unreadable frame.
func TestOpenUnexpectedAnswerSaysNotAPlaintextPort(t *testing.T) {
	addr := opentest.Peer(t, func(c net.Conn) {
		if _, err := io.ReadFull(c, make([]byte, 8)); err != nil { // "AMQP" 0 0 9 1
			return
		}
		// connection.close-ok (class 10, method 51) where connection.start belongs
		_, _ = c.Write([]byte{1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 51, 0xCE})
		// Left open, the socket would close only at the dial timeout (10s).
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("the client left the socket of the failed handshake open: %v", err)
		}
	})
	_, err := opentest.OpenFails(t, "amqp://"+addr+"/?dial_timeout=10s") // a peer that does not answer connection.start
	if !errors.Is(err, adapters.ErrTLS) || !strings.Contains(err.Error(), "not a plaintext port?") || !strings.Contains(err.Error(), "use amqps://") {
		t.Fatalf("Open = %v, want ErrTLS saying it may not be a plaintext port", err)
	}
}
