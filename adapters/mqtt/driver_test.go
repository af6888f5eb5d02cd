package mqtt_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/ports"
)

func receiveN(t *testing.T, ctx context.Context, sub ports.Subscription, n int) []*ports.Delivery {
	t.Helper()
	var out []*ports.Delivery
	for len(out) < n {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ds, err := sub.Receive(rctx, n-len(out))
		cancel()
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

func noDelivery(t *testing.T, sub ports.Subscription, window time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	if ds, err := sub.Receive(ctx, 1); err == nil {
		t.Fatalf("unexpected delivery %s (redelivery count %d): %s", ds[0].ID, ds[0].RedeliveryCount, what)
	}
}

// TestHeadOfLineRequeue shows the head-of-line effect of in-order PUBACKs:
// while the first delivery waits out its requeue backoff, the PUBACKs of
// the later, acknowledged ones are held back; once it is acknowledged they
// all go out, and nothing comes back after a restart.
func TestHeadOfLineRequeue(t *testing.T) {
	m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAdapter(t, ctx, m.URL(), "hol"+randHex(), 0)
	spec := ports.SubscriptionSpec{Topic: "jobs", Group: "workers", Instance: "r0", InFlight: 4}
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ids := produce(ctx, t, a, "jobs", 3, nil)
	ds := receiveN(t, ctx, sub, 3)
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Requeue, Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(ctx, ds[1:], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if n := mqtt.HeldBack(a); n != 2 {
		t.Fatalf("%d PUBACKs held back behind the requeued head, want 2", n)
	}
	again := receiveN(t, ctx, sub, 1)[0]
	if again.ID != ids[0] || again.RedeliveryCount != 1 {
		t.Fatalf("redelivered %s with count %d, want %s with 1", again.ID, again.RedeliveryCount, ids[0])
	}
	if time.Since(ds[0].ReceivedAt) < 300*time.Millisecond {
		t.Fatalf("redelivered %v after the first delivery, before the 300ms backoff", time.Since(ds[0].ReceivedAt))
	}
	if err := sub.Settle(ctx, []*ports.Delivery{again}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	// The head's PUBACK releases the two held back behind it.
	for tick := time.NewTicker(10 * time.Millisecond); mqtt.HeldBack(a) != 0; <-tick.C {
		if ctx.Err() != nil {
			t.Fatalf("%d PUBACKs still held back after the head was acknowledged", mqtt.HeldBack(a))
		}
	}
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sub, err = a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	noDelivery(t, sub, 500*time.Millisecond, "every message was acknowledged before the restart")
}

// TestSettleContract: a second settlement of the same delivery is refused
// and settles nothing; Settle and Receive after Stop return ErrClosed.
func TestSettleContract(t *testing.T) {
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAdapter(t, ctx, b.URL(), "settle"+randHex(), 0)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", Instance: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, "t", 2, nil)
	ds := receiveN(t, ctx, sub, 2)
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Requeue}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("second settlement returned %v, want ErrInvalid", err)
	}
	noDelivery(t, sub, 200*time.Millisecond, "a refused second settlement must not requeue")
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(ctx, ds[1:], ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle after Stop returned %v, want ErrClosed", err)
	}
	if _, err := sub.Receive(ctx, 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Stop returned %v, want ErrClosed", err)
	}
	if _, ok := <-sub.Errors(); ok {
		t.Fatal("Errors() not closed after Stop")
	}
}

// TestSendOutcomes: reason code 16 (no matching subscribers: the broker
// dropped the publish) fails a Send with ports.ErrNoSubscriber, unless
// DropUnroutable, and a dead letter always; a broker refusal (PUBACK 0x87)
// is an unconfirmed SendError.
func TestSendOutcomes(t *testing.T) {
	var refuse atomic.Bool
	b, err := embedded.Start(embedded.Options{AllowPublish: func(_, topic string) bool {
		return !refuse.Load() || !strings.HasSuffix(topic, "/refused")
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	raw := rawPublish(t, ctx, m.Addr(), "nobody/listens")
	if raw != 16 {
		t.Fatalf("mosquitto answered reason code %d with no subscriber, want 16", raw)
	}
	for _, url := range []string{m.URL(), b.URL()} {
		am := newAdapter(t, ctx, url, "send"+randHex(), 0)
		var se *ports.SendError
		err := am.Send(ctx, ports.Message{Topic: "nobody", Payload: []byte(`{}`)})
		if !errors.As(err, &se) || !errors.Is(err, ports.ErrNoSubscriber) || !strings.Contains(err.Error(), "0x10") {
			t.Fatalf("%s: Send with no subscriber (reason code 16) returned %v, want a SendError wrapping ErrNoSubscriber", url, err)
		}
		drop := newAdapterOpts(t, ctx, mqtt.Options{URL: url, Namespace: "send" + randHex(), DropUnroutable: true})
		if err := drop.Send(ctx, ports.Message{Topic: "nobody", Payload: []byte(`{}`)}); err != nil {
			t.Fatalf("%s: Send with no subscriber and DropUnroutable returned %v, want nil", url, err)
		}
		if err := drop.Send(ctx, ports.Message{Topic: "nobody.dlq", Payload: []byte(`{}`)}); !errors.Is(err, ports.ErrNoSubscriber) {
			t.Fatalf("%s: a dead letter nobody subscribes to, with DropUnroutable, returned %v, want ErrNoSubscriber", url, err)
		}
	}

	ae := newAdapterOpts(t, ctx, mqtt.Options{URL: b.URL(), Namespace: "send", DropUnroutable: true})
	refuse.Store(true)
	err = ae.Send(ctx, ports.Message{Topic: "ok", Payload: []byte(`{}`)}, ports.Message{Topic: "refused", Payload: []byte(`{}`)})
	var se *ports.SendError
	if !errors.As(err, &se) || se.Index != 1 || !errors.Is(err, ports.ErrUnconfirmed) || !strings.Contains(err.Error(), "0x87") {
		t.Fatalf("Send to a refused topic returned %v, want a SendError #1 wrapping ErrUnconfirmed with reason 0x87", err)
	}
}

func rawPublish(t *testing.T, ctx context.Context, addr, topic string) byte {
	t.Helper()
	c := rawConnect(t, ctx, addr)
	defer c.Disconnect(&paho.Disconnect{})
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	return r.ReasonCode
}

// TestMalformedDeliverAt: a message with a malformed delay header (here
// the one earlier versions of the adapter wrote) is handed over at once
// with Delivery.Err set to a *ports.HeaderError (the core dead-letters it
// as poison), never dropped.
func TestMalformedDeliverAt(t *testing.T) {
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAdapter(t, ctx, b.URL(), "bad", 0)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", Instance: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	c := rawConnect(t, ctx, b.Addr())
	defer c.Disconnect(&paho.Disconnect{})
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "bad/t", QoS: 1, Payload: []byte("{}"), Properties: &paho.PublishProperties{
		User: []paho.UserProperty{{Key: ports.HeaderID, Value: "m1"}, {Key: "sluice-deliver-at", Value: "tomorrow"}}}}); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, ctx, sub, 1)[0]
	if d.ID != "m1" {
		t.Fatalf("got %s, want m1", d.ID)
	}
	var he *ports.HeaderError
	if !errors.As(d.Err, &he) || he.Header != kit.HeaderNotBefore || !ports.IsPoison(d.Err) {
		t.Fatalf("Delivery.Err = %v, want a poison HeaderError for %s", d.Err, kit.HeaderNotBefore)
	}
}

func rawConnect(t *testing.T, ctx context.Context, addr string) *paho.Client {
	t.Helper()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "raw-" + randHex(), CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{RequestProblemInfo: true}}); err != nil {
		t.Fatal(err)
	}
	return c
}
