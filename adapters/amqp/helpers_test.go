package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
)

// namespace returns a fresh namespace, so tests sharing one node never
// meet.
func namespace(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// newAdapter makes an adapter on the shared node (or url) and closes it at
// the end of t.
func newAdapter(t testing.TB, o amqp.Options) *amqp.Adapter {
	t.Helper()
	if o.URL == "" {
		o.URL = rabbittest.Shared(t).URL
	}
	if o.Namespace == "" {
		o.Namespace = namespace("t")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := amqp.New(ctx, o)
	if err != nil {
		t.Fatalf("amqp.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// sharedProxy returns a proxy in front of the shared node, for tests that
// cut connections; it closes after the test's adapters (cleanups run last
// first).
func sharedProxy(t *testing.T) *rabbittest.Proxy {
	t.Helper()
	proxy, err := rabbittest.NewProxy(strings.TrimSuffix(strings.TrimPrefix(rabbittest.Shared(t).URL, "amqp://guest:guest@"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy
}

// proxied is an adapter behind a proxy in front of the shared node, whose
// connections the test cuts, and a direct adapter in the same namespace
// that sends.
type proxied struct {
	proxy     *rabbittest.Proxy
	a, direct *amqp.Adapter
}

// newProxied makes a proxied pair with queue type qt (zero: the default)
// in a fresh namespace; the proxied adapter dials again quickly after a
// cut.
func newProxied(t *testing.T, prefix string, qt amqp.QueueType) proxied {
	t.Helper()
	p := proxied{proxy: sharedProxy(t)}
	ns := namespace(prefix)
	p.a = newAdapter(t, amqp.Options{URL: p.proxy.URL(), Namespace: ns, QueueType: qt, DialTimeout: 2 * time.Second,
		ReconnectBackoff: 50 * time.Millisecond, ReconnectMaxBackoff: 500 * time.Millisecond})
	p.direct = newAdapter(t, amqp.Options{Namespace: ns, QueueType: qt})
	return p
}

// cut cuts the proxied connections, failing t unless the consume one was
// among them.
func (p proxied) cut(t *testing.T) {
	t.Helper()
	if n := p.proxy.Cut(); n < 1 {
		t.Fatalf("cut %d connections, want at least the consume connection", n)
	}
}

// receiveAsync runs one Receive in the background, so that a fault under
// a waiting receive is seen by it (the driver reads the broker's delivery
// channel inside Receive); the channel yields the delivery, or an empty
// one when none came within 40s.
func receiveAsync(s ports.Subscription) <-chan *ports.Delivery {
	got := make(chan *ports.Delivery, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		ds, _ := s.Receive(ctx, 1)
		if len(ds) == 0 {
			ds = append(ds, &ports.Delivery{})
		}
		got <- ds[0]
	}()
	return got
}
