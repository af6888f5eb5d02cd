package redis_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/internal/clitest"
	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// consumeOnce starts a pipeline on topic whose handler reports each
// delivery and returns handle's outcome. It is stopped at the end of t.
func consumeOnce(t *testing.T, a *redis.Adapter, topic string, handle func(*ports.Delivery) error) <-chan *ports.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	got := make(chan *ports.Delivery, 16)
	p := flow.New(a, ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return handle(d) })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return got
}

func next(t *testing.T, ch <-chan *ports.Delivery, what string) *ports.Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out after 20s waiting for %s", what)
		return nil
	}
}

// A plain producer's field/value entry (no "payload" field) is delivered
// with its fields as a JSON object, identified by its entry id, and its
// dead-letter copy keeps every original field byte for byte (before, it
// was poison and its dead-letter copy had an empty payload and none of
// the fields).
func TestFieldValueEntryDeliveredAndDeadLetteredIntact(t *testing.T) {
	ns := namespace("fv")
	a := newAdapter(t, redis.Options{Namespace: ns})
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr(t)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "readings"
	got := consumeOnce(t, a, topic, func(*ports.Delivery) error { return ports.Poisonf("refused by the test") })
	dead := consumeOnce(t, a, topic+".dlq", func(*ports.Delivery) error { return nil })

	fields := map[string]string{"id": "r-1", "total": "11", "html": "<a&b>", "bin": "\xff\x00\x01", "key": "not the partition key"}
	stream := ns + ":stream:" + topic
	entry, err := c.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"id", "r-1", "total", "11", "html", "<a&b>", "bin", "\xff\x00\x01", "key", "not the partition key"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, got, "the field/value entry")
	if d.Err != nil {
		t.Fatalf("delivered with Err %v: a field/value entry is not poison", d.Err)
	}
	wantPayload := `{"bin":"\ufffd\u0000\u0001","html":"<a&b>","id":"r-1","key":"not the partition key","total":"11"}`
	if string(d.Payload) != wantPayload {
		t.Errorf("payload %s, want %s", d.Payload, wantPayload)
	}
	wantID := "redis:" + stream + ":" + entry
	if d.ID != wantID || d.IDSource != ports.IDBroker || d.Key != "" || d.Facts.Get(redis.FactFormat) != "fields" {
		t.Errorf("ID %q (%s) key %q facts %v; want %q (broker), no key, format fields", d.ID, d.IDSource, d.Key, d.Facts, wantID)
	}
	dl := next(t, dead, "the dead-letter copy")
	if string(dl.Payload) != wantPayload || dl.ID != wantID || dl.IDSource != ports.IDBroker {
		t.Errorf("dead-letter copy payload %s ID %q (%s); want the original's", dl.Payload, dl.ID, dl.IDSource)
	}
	xs, err := c.XRange(ctx, ns+":stream:"+topic+".dlq", "-", "+").Result()
	if err != nil || len(xs) != 1 {
		t.Fatalf("XRANGE of the dead-letter stream: %d entries, %v", len(xs), err)
	}
	v := xs[0].Values
	for k, want := range fields {
		if v[k] != want {
			t.Errorf("dead-letter entry field %q = %q, want %q byte for byte", k, v[k], want)
		}
	}
	if _, ok := v["payload"]; ok {
		t.Errorf("dead-letter entry has a payload field: a copy of a field/value entry keeps its fields: %v", v)
	}
	if r, _ := v["h:"+ports.HeaderDeadLetterReason].(string); !strings.Contains(r, "refused by the test") {
		t.Errorf("dead-letter entry lacks its reason header: %v", v)
	}
}

// redis-cli writes what a shell script writes; sluice reads it, and
// redis-cli reads what sluice writes (its "payload" and "h:" fields).
func TestInteropRedisCLI(t *testing.T) {
	cli := clitest.Require(t, "redis-cli", "redis-tools")
	host, port, err := net.SplitHostPort(sharedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace("cli")
	a := newAdapter(t, redis.Options{Namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		out, err := clitest.Run(ctx, 10*time.Second, nil, cli, append([]string{"-h", host, "-p", port}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	t.Run("redis-cli XADD to sluice", func(t *testing.T) {
		got := consumeOnce(t, a, "orders", func(*ports.Delivery) error { return nil })
		entry := run("XADD", ns+":stream:orders", "*", "id", "r-1", "total", "11")
		d := next(t, got, "the entry redis-cli added")
		if string(d.Payload) != `{"id":"r-1","total":"11"}` || d.ID != "redis:"+ns+":stream:orders:"+entry || d.IDSource != ports.IDBroker {
			t.Fatalf("got payload %s ID %q (%s)", d.Payload, d.ID, d.IDSource)
		}
	})

	t.Run("sluice to redis-cli XRANGE", func(t *testing.T) {
		_ = consumeOnce(t, a, "paid", func(*ports.Delivery) error { return nil }) // creates the group
		m := ports.Message{Topic: "paid", Payload: []byte(`{"order":"o-1"}`), Headers: ports.NewHeaders(ports.HeaderID, "id-1", ports.HeaderType, "com.example.paid.v1")}
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		out := run("--no-raw", "XRANGE", ns+":stream:paid", "-", "+")
		for _, want := range []string{`"payload"`, `"{\"order\":\"o-1\"}"`, `"h:ce-id"`, `"id-1"`, `"h:ce-type"`, `"com.example.paid.v1"`} {
			if !strings.Contains(out, want) {
				t.Errorf("redis-cli XRANGE output lacks %s:\n%s", want, out)
			}
		}
	})
}
