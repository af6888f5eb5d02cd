package mqtt_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
// the newcomer that the session is in use, so Subscribe cannot refuse);
// the first is disconnected with "Session taken over", and that is
// reported on its Errors and logged, naming the instance, and its Receive
// fails — instead of it silently receiving nothing. The displaced one does
// not reconnect (which would take the session back), so the newcomer keeps
// receiving.
func TestBroadcastInstanceCollisionDetected(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ns := "collide" + randHex()
			var log syncBuffer
			first, err := mqtt.New(ctx, mqtt.Options{URL: "mqtt://" + b.addr, Namespace: ns, ReceiveMaximum: b.rm,
				Logger:           slog.New(slog.NewTextHandler(&log, nil)),
				ReconnectBackoff: 50 * time.Millisecond, ConnectTimeout: 2 * time.Second, KeepAlive: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := first.Close(c); err != nil {
					t.Errorf("close first adapter: %v", err)
				}
			})
			second := newAdapter(t, ctx, "mqtt://"+b.addr, ns, b.rm)
			spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1", InstanceTTL: time.Minute}

			s1, err := first.Subscribe(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Stop(ctx)
			s2, err := second.Subscribe(ctx, spec)
			if err != nil {
				t.Fatalf("second Subscribe with the same Instance: %v; first's log:\n%s", err, log.String())
			}
			defer s2.Stop(ctx)

			var taken error
			deadline := time.After(15 * time.Second)
			for taken == nil {
				select {
				case err, ok := <-s1.Errors():
					if !ok {
						t.Fatal("first subscription's Errors closed without reporting the takeover")
					}
					if errors.Is(err, mqtt.ErrInstanceShared) {
						taken = err
					}
				case <-deadline:
					t.Fatal("the first subscription reported no session takeover within 15s of a second instance subscribing with the same Instance")
				}
			}
			var te *mqtt.SessionTakenOverError
			if !errors.As(taken, &te) || te.Instance != "node-1" || !strings.Contains(taken.Error(), `"node-1"`) || !strings.Contains(taken.Error(), "share") {
				t.Fatalf("takeover reported as %v, want a SessionTakenOverError naming instance \"node-1\" and saying two instances share it", taken)
			}
			if l := log.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "instance=node-1") || !strings.Contains(l, "share") {
				t.Fatalf("takeover not logged as an error naming the instance; log:\n%s", l)
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = s1.Receive(rctx, 1)
			rcancel()
			if !errors.Is(err, mqtt.ErrInstanceShared) {
				t.Fatalf("Receive on the displaced subscription returned %v, want ErrInstanceShared", err)
			}

			// The newcomer keeps the session: what is sent now reaches it,
			// and it is not taken over back.
			ids := produce(ctx, t, second, "prices", 3, nil)
			ds := receiveN(t, ctx, s2, len(ids))
			if err := s2.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			for {
				select {
				case err := <-s2.Errors():
					if errors.Is(err, mqtt.ErrInstanceShared) {
						t.Fatalf("the newcomer was taken over back: %v", err)
					}
					continue
				default:
				}
				break
			}
		})
	}
}
