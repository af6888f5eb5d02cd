package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/ports"
)

func newAdapterOpts(t *testing.T, ctx context.Context, o mqtt.Options) *mqtt.Adapter {
	t.Helper()
	o.Logger, o.ReconnectBackoff, o.ConnectTimeout = quietLog, 100*time.Millisecond, 2*time.Second
	a, err := mqtt.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(c); err != nil {
			t.Errorf("close adapter: %v", err)
		}
	})
	return a
}

func stopSub(t *testing.T, sub ports.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestDeclareTopicRecordsAndRefuses: a redeclaration with other properties
// is a RedeclareError naming the difference; what MQTT cannot keep is
// refused with ErrUnsupported; Start earliest and single-active
// subscriptions are refused before any connection is made.
func TestDeclareTopicRecordsAndRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers := faultBrokers(t)
	b := brokers[len(brokers)-1] // embedded
	a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: "decl" + randHex(), ReceiveMaximum: b.rm})
	spec := ports.TopicSpec{Topic: "state", Retention: 30 * time.Second}
	if err := ports.DeclareTopic(ctx, a, spec); err != nil {
		t.Fatal(err)
	}
	if err := ports.DeclareTopic(ctx, a, spec); err != nil {
		t.Fatalf("same declaration again: %v", err)
	}
	var re *ports.RedeclareError
	err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "state", Retention: time.Minute})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "Retention") {
		t.Fatalf("redeclare with another retention: %v, want a RedeclareError naming Retention", err)
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "x", MaxLength: 10}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("DeclareTopic with MaxLength = %v, want ErrUnsupported", err)
	}
	// A group declared ahead waits in the session of the member with the
	// adapter's Instance: without one it would be stranded.
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "y", Groups: []string{"g"}}); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "Instance") {
		t.Errorf("DeclareTopic with Groups and no Instance = %v, want ErrInvalid naming Options.Instance", err)
	}
	for _, s := range []ports.SubscriptionSpec{
		{Topic: "state", Group: "g", Start: ports.StartEarliest},
		{Topic: "state", Group: "g", SingleActive: true},
	} {
		if sub, err := a.Subscribe(ctx, s); !errors.Is(err, ports.ErrUnsupported) {
			if sub != nil {
				stopSub(t, sub)
			}
			t.Errorf("Subscribe(%+v) = %v, want ErrUnsupported", s, err)
		}
	}
	if c := a.Capabilities(); c.MaxMessageBytes != mqtt.MaxPacketBytes || !c.SizeCountsEnvelope || !c.BestEffort || !c.Retention {
		t.Errorf("capabilities %s", c)
	}
}

// TestOversizedPublishRefusedBeforeTheBroker: mosquitto with
// max_packet_size announces its Maximum Packet Size in the CONNACK; the
// adapter's limit becomes it, and a message whose PUBLISH would exceed it
// fails with a SizeError (ErrInvalid) before anything is written: the
// publish fault hook, which sees every publish, is never called. One just
// below the limit is delivered.
func TestOversizedPublishRefusedBeforeTheBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const limit = 64 << 10
	m := mqtttest.Require(t, mqtttest.MosquittoOptions{Extra: []string{fmt.Sprintf("max_packet_size %d", limit)}})
	a := newAdapterOpts(t, ctx, mqtt.Options{URL: m.URL(), Namespace: "size" + randHex()})
	if got := a.Capabilities().MaxMessageBytes; got != limit {
		t.Fatalf("MaxMessageBytes %d, want the broker's %d", got, limit)
	}
	var calls atomic.Int32
	mqtt.SetPublishFault(a, func(string) error { calls.Add(1); return nil })
	big := ports.Message{Topic: "big", Payload: make([]byte, limit)}
	err := a.Send(ctx, big)
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || !se.Envelope || se.Limit != limit {
		t.Fatalf("Send of %d bytes: %v, want a SizeError counting the envelope", len(big.Payload), err)
	}
	if calls.Load() != 0 {
		t.Fatal("the oversized message reached the publish path")
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "big", Group: "g", Instance: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	defer stopSub(t, sub)
	fits := ports.Message{Topic: "big", Payload: make([]byte, limit-1024)}
	if err := a.Send(ctx, fits); err != nil {
		t.Fatalf("Send of %d bytes under a %d limit: %v", len(fits.Payload), limit, err)
	}
	d := receiveN(t, ctx, sub, 1)[0]
	if len(d.Payload) != len(fits.Payload) {
		t.Fatalf("received %d bytes, sent %d", len(d.Payload), len(fits.Payload))
	}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// rawClient connects a plain paho client (no sluice) to addr.
func rawClient(t *testing.T, ctx context.Context, addr string, onPublish func(*paho.Publish)) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { onPublish(pr.Packet); return true, nil },
	}})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "raw" + randHex(), CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

// TestPublishCarriesClassAndRetention: on the wire, a best-effort message
// is a QoS 0 PUBLISH, an at-least-once one QoS 1, and a topic declared
// with a retention carries it as the Message Expiry Interval (rounded up
// to seconds) — read by a raw MQTT client.
func TestPublishCarriesClassAndRetention(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ns := "wire" + randHex()
			a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: ns, ReceiveMaximum: b.rm})
			if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "ticks", Retention: 1500 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			got := make(chan *paho.Publish, 4)
			raw := rawClient(t, ctx, b.addr, func(p *paho.Publish) { got <- p })
			if _, err := raw.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: ns + "/#", QoS: 1}}}); err != nil {
				t.Fatal(err)
			}
			if err := a.Send(ctx, ports.Message{Topic: "ticks", Payload: []byte("q0"), QoS: ports.BestEffort},
				ports.Message{Topic: "plain", Payload: []byte("q1")}); err != nil {
				t.Fatal(err)
			}
			seen := map[string]*paho.Publish{}
			for len(seen) < 2 {
				select {
				case p := <-got:
					seen[string(p.Payload)] = p
				case <-ctx.Done():
					t.Fatalf("raw client received %d of 2", len(seen))
				}
			}
			q0, q1 := seen["q0"], seen["q1"]
			if q0.QoS != 0 || q0.Topic != ns+"/ticks" {
				t.Errorf("best-effort message: QoS %d on %q, want QoS 0 on %s/ticks", q0.QoS, q0.Topic, ns)
			}
			if q0.Properties == nil || q0.Properties.MessageExpiry == nil || *q0.Properties.MessageExpiry == 0 || *q0.Properties.MessageExpiry > 2 {
				t.Errorf("message expiry of a topic declared with 1.5s retention: %+v, want 1..2 s", q0.Properties)
			}
			// None, or a broker's own maximum (some stamp one, far above 2s).
			if q1.QoS != 1 || (q1.Properties != nil && q1.Properties.MessageExpiry != nil && *q1.Properties.MessageExpiry <= 2) {
				t.Errorf("at-least-once message on an undeclared topic: QoS %d, properties %+v", q1.QoS, q1.Properties)
			}
		})
	}
}

// TestScopedTopicsAreTopicLevels: "tenant/namespace/name" maps to the
// levels "<ns>/tenant/namespace/name"; two tenants' topics of one name,
// and the unscoped one, never share a message.
func TestScopedTopicsAreTopicLevels(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ns := "scope" + randHex()
			a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: ns, ReceiveMaximum: b.rm})
			topics := []ports.Topic{"acme/prod/orders", "zeta/prod/orders", "orders"}
			subs := make([]ports.Subscription, len(topics))
			for i, tp := range topics {
				sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: tp, Group: "g", Instance: "i" + randHex()})
				if err != nil {
					t.Fatal(err)
				}
				defer stopSub(t, sub)
				subs[i] = sub
			}
			for _, tp := range topics {
				if err := a.Send(ctx, ports.Message{Topic: tp, Payload: []byte(tp)}); err != nil {
					t.Fatal(err)
				}
			}
			// A second round proves nothing of the first went elsewhere:
			// each subscription gets exactly its own two messages.
			for _, tp := range topics {
				if err := a.Send(ctx, ports.Message{Topic: tp, Payload: []byte(tp)}); err != nil {
					t.Fatal(err)
				}
			}
			for i, sub := range subs {
				for _, d := range receiveN(t, ctx, sub, 2) {
					if string(d.Payload) != string(topics[i]) || d.Topic != topics[i] {
						t.Errorf("subscription to %q got %q (topic %q)", topics[i], d.Payload, d.Topic)
					}
					if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
						t.Fatal(err)
					}
				}
				noDelivery(t, sub, 200*time.Millisecond, "a scoped topic received another's message")
			}
		})
	}
}

// TestExistingNamesAdopted: a logical topic and group mapped to an MQTT
// topic and share name that a legacy program uses: the adapter publishes
// to the legacy topic byte for byte and consumes from the legacy shared
// subscription, which a raw publisher feeds.
func TestExistingNamesAdopted(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			legacy := "plant" + randHex() + "/line1/temps"
			a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: "adopt" + randHex(), ReceiveMaximum: b.rm,
				Existing: []mqtt.Existing{{Topic: "temps", PhysicalTopic: legacy, Shares: map[string]string{"billing": "legacy-share"}}}})
			got := make(chan *paho.Publish, 4)
			raw := rawClient(t, ctx, b.addr, func(p *paho.Publish) { got <- p })
			if _, err := raw.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: legacy, QoS: 1}}}); err != nil {
				t.Fatal(err)
			}
			if err := a.Send(ctx, ports.Message{Topic: "temps", Payload: []byte("from sluice")}); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-got:
				if p.Topic != legacy || string(p.Payload) != "from sluice" {
					t.Fatalf("raw subscriber got %q on %q", p.Payload, p.Topic)
				}
			case <-ctx.Done():
				t.Fatal("the legacy topic received nothing")
			}
			sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "temps", Group: "billing", Instance: "r0"})
			if err != nil {
				t.Fatal(err)
			}
			defer stopSub(t, sub)
			if _, err := raw.Publish(ctx, &paho.Publish{Topic: legacy, QoS: 1, Payload: []byte("from legacy")}); err != nil {
				t.Fatal(err)
			}
			d := receiveN(t, ctx, sub, 1)[0]
			if string(d.Payload) != "from legacy" || d.Topic != "temps" {
				t.Fatalf("adopted subscription got %q on %q", d.Payload, d.Topic)
			}
			if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestExistingNamesValidated: adopted names that could collide are refused
// at New.
func TestExistingNamesValidated(t *testing.T) {
	ctx := context.Background()
	for _, ex := range [][]mqtt.Existing{
		{{Topic: "a", PhysicalTopic: "x/+"}},
		{{Topic: "a", PhysicalTopic: "sluice/a"}},
		{{Topic: "a", PhysicalTopic: "x"}, {Topic: "b", PhysicalTopic: "x"}},
		{{Topic: "a", PhysicalTopic: "x"}, {Topic: "b", PhysicalTopic: "x/dlq"}},
		{{Topic: "a", PhysicalTopic: "x", Shares: map[string]string{"g": "s/t"}}},
	} {
		if a, err := mqtt.New(ctx, mqtt.Options{URL: "mqtt://127.0.0.1:1", Existing: ex}); !errors.Is(err, ports.ErrInvalid) {
			if a != nil {
				_ = a.Close(ctx)
			}
			t.Errorf("New with Existing %+v: %v, want ErrInvalid", ex, err)
		}
	}
}

// TestBestEffortSubscription: a best-effort subscription subscribes at
// QoS 0 and receives best-effort messages; a settled delivery needs no
// PUBACK.
func TestBestEffortSubscription(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: "q0" + randHex(), ReceiveMaximum: b.rm})
			sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "ticks", Group: "g", Instance: "r0", QoS: ports.BestEffort})
			if err != nil {
				t.Fatal(err)
			}
			defer stopSub(t, sub)
			if err := a.Send(ctx, ports.Message{Topic: "ticks", Payload: []byte("t1"), QoS: ports.BestEffort}); err != nil {
				t.Fatal(err)
			}
			d := receiveN(t, ctx, sub, 1)[0]
			if string(d.Payload) != "t1" {
				t.Fatalf("got %q", d.Payload)
			}
			if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRetentionExpiresQueuedMessages: a message to a topic declared with
// a 1s retention, queued in a stopped member's session, is dropped by the
// broker once it is older than that: the member, resumed later, receives
// only what was sent after.
func TestRetentionExpiresQueuedMessages(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := newAdapterOpts(t, ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: "ret" + randHex(), ReceiveMaximum: b.rm})
			if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "state", Retention: time.Second}); err != nil {
				t.Fatal(err)
			}
			spec := ports.SubscriptionSpec{Topic: "state", Group: "g", Instance: "r0"}
			sub, err := a.Subscribe(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			stopSub(t, sub) // the session, with its shared subscription, stays
			if err := a.Send(ctx, ports.Message{Topic: "state", Payload: []byte("old")}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2100 * time.Millisecond) // what is tested: the message outlives its expiry interval
			if err := a.Send(ctx, ports.Message{Topic: "state", Payload: []byte("fresh")}); err != nil {
				t.Fatal(err)
			}
			sub, err = a.Subscribe(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer stopSub(t, sub)
			d := receiveN(t, ctx, sub, 1)[0]
			if string(d.Payload) != "fresh" {
				t.Fatalf("resumed member got %q first, want only %q (the expired message must be dropped)", d.Payload, "fresh")
			}
			if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			noDelivery(t, sub, 300*time.Millisecond, "the expired message was delivered")
		})
	}
}
