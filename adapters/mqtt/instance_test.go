package mqtt_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/ports"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestBroadcastInstanceCollisionDetected: a second process subscribing with
// the same Broadcast Instance gets the MQTT session (the broker cannot tell
// the newcomer that the session is in use, so Subscribe cannot refuse).
// The broker disconnects the first: the embedded broker with "Session
// taken over" (0x8E), so the first is the one that reports; mosquitto
// without a reason, so both reconnect and take the session from each
// other until the one that first saw five such losses in a row reports
// (usually the newcomer, whose connections all die young). The one that reports does so
// on its Errors and in its log, naming the instance, stops reconnecting and
// fails Receive — nobody silently receives nothing — and the other keeps
// the session and receives.
func TestBroadcastInstanceCollisionDetected(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ns := "collide" + randHex()
			logs := [2]*syncBuffer{{}, {}}
			var adapters [2]*mqtt.Adapter
			for i := range adapters {
				a, err := mqtt.New(ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: ns, ReceiveMaximum: b.rm,
					Logger:           slog.New(slog.NewTextHandler(logs[i], nil)),
					ReconnectBackoff: 50 * time.Millisecond, ConnectTimeout: 2 * time.Second, KeepAlive: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := a.Close(c); err != nil {
						t.Errorf("close adapter %d: %v", i, err)
					}
				})
				adapters[i] = a
			}
			spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1", InstanceTTL: time.Minute}
			var subs [2]ports.Subscription
			for i, a := range adapters {
				s, err := a.Subscribe(ctx, spec)
				if err != nil {
					t.Fatalf("Subscribe %d with Instance %q: %v; logs:\n%s\n%s", i, spec.Instance, err, logs[0], logs[1])
				}
				defer s.Stop(ctx)
				subs[i] = s
			}

			loser, taken := -1, error(nil)
			deadline := time.After(15 * time.Second)
			for loser < 0 {
				select {
				case err := <-subs[0].Errors():
					if errors.Is(err, ports.ErrInstanceShared) {
						loser, taken = 0, err
					}
				case err := <-subs[1].Errors():
					if errors.Is(err, ports.ErrInstanceShared) {
						loser, taken = 1, err
					}
				case <-deadline:
					t.Fatalf("no subscription reported a session takeover within 15s of two instances subscribing with the same Instance; logs:\n%s\n%s", logs[0], logs[1])
				}
			}
			winner := 1 - loser
			if b.name == "embedded" && loser != 0 {
				t.Fatalf("the newcomer reported the takeover (%v), want the first (the embedded broker sends it 0x8E)", taken)
			}
			t.Logf("subscription %d (0: first, 1: newcomer) reported: %v", loser, taken)
			var te *mqtt.SessionTakenOverError
			if !errors.As(taken, &te) || te.Instance != "node-1" || !strings.Contains(taken.Error(), `"node-1"`) || !strings.Contains(taken.Error(), "share") {
				t.Fatalf("takeover reported as %v, want a SessionTakenOverError naming instance \"node-1\" and saying two instances share it", taken)
			}
			if l := logs[loser].String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "instance=node-1") || !strings.Contains(l, "share") {
				t.Fatalf("takeover not logged as an error naming the instance; log:\n%s", l)
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := subs[loser].Receive(rctx, 1)
			rcancel()
			if !errors.Is(err, ports.ErrInstanceShared) {
				t.Fatalf("Receive on the displaced subscription returned %v, want ErrInstanceShared", err)
			}

			// The other keeps the session: what is sent now reaches it,
			// and it is not taken over.
			ids := produce(ctx, t, adapters[winner], "prices", 3, nil)
			ds := receiveN(t, ctx, subs[winner], len(ids))
			if err := subs[winner].Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			noneShared(t, subs[winner], "the remaining subscription was taken over too")
		})
	}
}

// TestSameInstanceDisplacedOnceSurvives: a connection with the
// subscription's client id that takes its session once and is gone again,
// as the late CONNECT of a stopped predecessor under the same Instance
// does, does not make it give up: it reconnects, takes the session back,
// reports no ErrInstanceShared and receives.
func TestSameInstanceDisplacedOnceSurvives(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ns := "displaced" + randHex()
			spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1", InstanceTTL: time.Minute}
			a := newAdapter(t, ctx, "mqtt://"+b.addr, ns, b.rm)
			sub, err := a.Subscribe(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Stop(ctx)

			// The predecessor's late CONNECT: same client id, the session kept.
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", b.addr)
			if err != nil {
				t.Fatal(err)
			}
			ghost := paho.NewClient(paho.ClientConfig{Conn: conn})
			expiry := uint32(60)
			if _, err := ghost.Connect(ctx, &paho.Connect{ClientID: mqtt.ClientID(ns, spec), KeepAlive: 30,
				Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
				t.Fatalf("the late CONNECT: %v", err)
			}
			_ = conn.Close() // gone without a DISCONNECT, as a stopped process's connection is

			ids := produce(ctx, t, a, "prices", 3, nil)
			ds := receiveN(t, ctx, sub, len(ids))
			if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			noneShared(t, sub, "displaced once by a connection that is gone, the subscription gave up")
		})
	}
}

// noneShared fails the test with what when sub reported ErrInstanceShared
// among the errors it reported so far.
func noneShared(t *testing.T, sub ports.Subscription, what string) {
	t.Helper()
	for {
		select {
		case err := <-sub.Errors():
			if errors.Is(err, ports.ErrInstanceShared) {
				t.Fatalf("%s: %v", what, err)
			}
		default:
			return
		}
	}
}
