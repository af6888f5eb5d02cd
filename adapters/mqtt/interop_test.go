package mqtt_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/internal/clitest"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// mosquitto_pub and mosquitto_sub (mosquitto-clients) against mosquitto:
// sluice reads what a device publishes without user properties (no
// identity, the body intact, the content-type property as a header), and
// mosquitto_sub reads what sluice publishes (the body as sent, the
// envelope as MQTT 5 user properties, content-type as the property).
func TestInteropMosquittoClients(t *testing.T) {
	pub := clitest.Require(t, "mosquitto_pub", "mosquitto-clients")
	sub := clitest.Require(t, "mosquitto_sub", "mosquitto-clients")
	m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
	host, port, err := net.SplitHostPort(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := "interop" + randHex()
	a, err := mqtt.New(ctx, mqtt.Options{URL: m.URL(), Namespace: ns, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())

	for _, qos := range []string{"1", "0"} {
		t.Run("mosquitto_pub QoS "+qos+" to sluice", func(t *testing.T) {
			mosquittoPubToSluice(ctx, t, a, pub, host, port, ns, qos)
		})
	}

	t.Run("sluice to mosquitto_sub", func(t *testing.T) {
		topic := mqtt.PhysicalTopic(ns, "paid")
		id := "interop-sub-" + randHex()
		args := []string{"-V", "mqttv5", "-q", "1", "-h", host, "-p", port, "-t", topic, "-i", id, "-c", "-x", "60"}
		// A persistent session subscribed first (-E exits once subscribed),
		// so the message waits for the second run whatever its timing.
		if _, err := clitest.Run(ctx, 10*time.Second, nil, sub, append(args, "-E")...); err != nil {
			t.Fatal(err)
		}
		msg := ports.Message{Topic: "paid", Payload: []byte(`{"order":"o-1"}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-1", ports.HeaderType, "com.example.paid.v1", ports.HeaderContentType, "application/json")}
		if err := a.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		out, err := clitest.Run(ctx, 15*time.Second, nil, sub, append(args, "-C", "1", "-W", "10", "-F", "%C|%P|%p")...)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(out))
		for _, want := range []string{"application/json|", "ce-id:id-1", "ce-type:com.example.paid.v1", `|{"order":"o-1"}`} {
			if !strings.Contains(s, want) {
				t.Errorf("mosquitto_sub printed %q, lacking %q", s, want)
			}
		}
		t.Logf("mosquitto_sub -F '%%C|%%P|%%p': %s", s)
	})
}

// mosquittoPubToSluice publishes one message with mosquitto_pub at qos and
// checks what sluice's consumer receives.
func mosquittoPubToSluice(ctx context.Context, t *testing.T, a *mqtt.Adapter, pub, host, port, ns, qos string) {
	topic := ports.Topic("sensors" + qos)
	got := make(chan *ports.Delivery, 1)
	p := flow.New(a, ports.SubscriptionSpec{Topic: topic, Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return nil })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	if _, err := clitest.Run(ctx, 10*time.Second, nil, pub, "-V", "mqttv5", "-q", qos, "-h", host, "-p", port,
		"-t", mqtt.PhysicalTopic(ns, topic), "-D", "publish", "content-type", "application/json", "-m", `{"t":21.5}`); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if string(d.Payload) != `{"t":21.5}` || d.ID != "" || d.IDSource != ports.IDNone || d.HasIdentity() || d.Err != nil {
			t.Fatalf("got payload %s ID %q (%s) err %v; want the body, no identity", d.Payload, d.ID, d.IDSource, d.Err)
		}
		if d.Headers.Get(ports.HeaderContentType) != "application/json" {
			t.Errorf("content-type header %q, want the MQTT 5 property's application/json", d.Headers.Get(ports.HeaderContentType))
		}
	case <-ctx.Done():
		t.Fatal("sluice never received what mosquitto_pub published")
	}
	// The delivery is settled (a QoS 0 one has nothing to acknowledge).
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Acked < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("not acked in 10s: %+v", p.Stats())
		}
		time.Sleep(time.Millisecond) // polling a counter, bounded by the deadline
	}
}
