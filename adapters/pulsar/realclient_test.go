package pulsar_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/ports"
)

// With the real client and nothing listening, Send and Subscribe fail with
// errors (an unconfirmed publish, a failed subscription) instead of hanging
// or succeeding, and Close releases the client.
func TestRealClientWithoutBrokerFailsCleanly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	a, err := pulsar.New(context.Background(), pulsar.Options{URL: "pulsar://" + addr, OperationTimeout: 2 * time.Second, SendTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte("{}")})
	var se *ports.SendError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send without a broker = %v, want an unconfirmed SendError", err)
	}
	t.Logf("Send failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	start = time.Now()
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "g"}); err == nil {
		t.Fatal("Subscribe without a broker succeeded")
	} else {
		t.Logf("Subscribe failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
