package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// TestInteropWatermillRedisstream: an adapter with RawStreamNames and
// WireWatermill shares streams with watermill-redisstream v1.4.5 in both
// directions — UUID as the message id, metadata as headers, payload intact.
func TestInteropWatermillRedisstream(t *testing.T) {
	a := newAdapter(t, redis.Options{RawStreamNames: true, Wire: redis.WireWatermill})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// watermill-redisstream closes the client it is given on Close: one
	// client per side.
	client := func() *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: sharedAddr(t)}) }
	logger := watermill.NopLogger{}

	t.Run("sluice to watermill-redisstream", func(t *testing.T) {
		topic := namespace("interop.s2w")
		// Its reader returns at once when Close closes its client (instead
		// of blocking on its first read until then, and sleeping 500 ms
		// after the error), so no goroutine of it outlives the test.
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: client(), ConsumerGroup: "wm", OldestId: "0",
			DisableIndefiniteInitialBlock: true, ShouldStopOnReadErrors: func(err error) bool {
				return errors.Is(err, goredis.ErrClosed) || errors.Is(err, context.Canceled)
			}}, logger)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		msgs, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		m := ports.Message{Topic: ports.Topic(topic), Key: "k-1", Payload: []byte(`{"n":1}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-s2w", "tenant", "acme")}
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-msgs:
			got.Ack()
			if got.UUID != "id-s2w" || string(got.Payload) != `{"n":1}` || got.Metadata.Get("tenant") != "acme" || got.Metadata.Get(ports.HeaderPartitionKey) != "k-1" {
				t.Fatalf("watermill-redisstream got uuid %q payload %q metadata %v", got.UUID, got.Payload, got.Metadata)
			}
		case <-ctx.Done():
			t.Fatal("watermill-redisstream subscriber never received the message sent by the adapter")
		}
	})

	t.Run("watermill-redisstream to sluice", func(t *testing.T) {
		topic := namespace("interop.w2s")
		got := make(chan *ports.Delivery, 1)
		p := flow.New(a, ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: "sl"}, flow.WithErrorHandler(func(error) {}))
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return nil })
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Stop(context.Background())
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client()}, logger)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		wm := message.NewMessage("id-w2s", []byte(`{"n":2}`))
		wm.Metadata.Set("tenant", "acme")
		if err := pub.Publish(topic, wm); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if d.ID != "id-w2s" || string(d.Payload) != `{"n":2}` || d.Headers.Get("tenant") != "acme" || d.RedeliveryCount != 0 {
				t.Fatalf("adapter got id %q payload %q headers %v count %d", d.ID, d.Payload, d.Headers, d.RedeliveryCount)
			}
		case <-ctx.Done():
			t.Fatal("the adapter never received the message published by watermill-redisstream")
		}
	})
}
