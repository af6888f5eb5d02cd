package pulsar_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/apache/pulsar-client-go/pulsar"

	sluicepulsar "github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
)

// A Watermill router runs over the package's Publisher and Subscriber: a
// handler's success acks the message id, its error nacks it and the broker
// redelivers it with the native count.
func TestWatermillRouterOverPublisherAndSubscriber(t *testing.T) {
	b := fakepulsar.New()
	t.Cleanup(b.Close)
	client := b.NewClient()
	defer client.Close()
	const topic = "persistent://public/default/wm-orders"

	pub, err := sluicepulsar.NewPublisher(client, sluicepulsar.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := sluicepulsar.NewSubscriber(client, sluicepulsar.SubscriberConfig{
		SubscriptionName: "wm",
		Consumer:         pulsar.ConsumerOptions{Type: pulsar.Shared, NackRedeliveryDelay: 10 * time.Millisecond},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: wait}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		uuid, key, custom string
		attempt           int
	}
	got := make(chan seen, 4)
	stopping := make(chan struct{})
	var once sync.Once
	defer sluicepulsar.OnUndecidedAtStop(func() { once.Do(func() { close(stopping) }) })()
	attempts := 0
	router.AddConsumerHandler("orders", topic, sub, func(m *message.Message) error {
		attempts++
		got <- seen{uuid: m.UUID, key: m.Metadata.Get(sluicepulsar.KeyMetadata), custom: m.Metadata.Get("custom"), attempt: attempts}
		if attempts == 1 {
			return errors.New("transient")
		}
		// The router closes its subscribers (and cancels their context)
		// while handlers still run, and acks only after the handler
		// returned: this ack comes after the subscriber began to stop,
		// and must still reach the broker.
		select {
		case <-stopping:
		case <-time.After(wait):
			t.Error("the subscriber never started to stop with the message undecided")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case <-ctx.Done():
		t.Fatal("router did not start")
	}

	m := message.NewMessage("uuid-1", []byte("hello"))
	m.Metadata.Set("custom", "v")
	m.Metadata.Set(sluicepulsar.KeyMetadata, "k1")
	if err := pub.Publish(topic, m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for want := 1; want <= 2; want++ {
		select {
		case s := <-got:
			if s.uuid != "uuid-1" || s.key != "k1" || s.custom != "v" || s.attempt != want {
				t.Fatalf("handler saw %+v on attempt %d", s, want)
			}
		case <-ctx.Done():
			t.Fatalf("attempt %d never arrived", want)
		}
	}
	if err := router.Close(); err != nil {
		t.Fatalf("router Close: %v", err)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("router Run: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var nacks, redelivered, acks int
	for _, e := range b.Events() {
		switch e.Op {
		case fakepulsar.OpNack:
			nacks++
		case fakepulsar.OpRedeliver:
			redelivered++
			if e.Count != 1 {
				t.Errorf("redelivery count %d, want 1", e.Count)
			}
		case fakepulsar.OpAck:
			acks++
		}
	}
	if nacks != 1 || redelivered != 1 || acks != 1 {
		t.Fatalf("nacks=%d redeliveries=%d acks=%d, want 1 each", nacks, redelivered, acks)
	}
}

func TestPublisherMapsDelayAndReportsUnconfirmed(t *testing.T) {
	b := fakepulsar.New()
	t.Cleanup(b.Close)
	client := b.NewClient()
	defer client.Close()
	pub, err := sluicepulsar.NewPublisher(client, sluicepulsar.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seenDelay time.Duration
	var seenProps map[string]string
	b.SetSendFault(func(_ string, pm *pulsar.ProducerMessage) error {
		seenDelay, seenProps = pm.DeliverAfter, pm.Properties
		if pm.Properties["fail"] == "yes" {
			return errors.New("refused")
		}
		return nil
	})
	ok := message.NewMessage("a", nil)
	delay.Message(ok, delay.For(time.Minute))
	if err := pub.Publish("t", ok); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if seenDelay != time.Minute || seenProps[sluicepulsar.NotBeforeProperty] == "" || seenProps[delay.DelayedForKey] != "" {
		t.Fatalf("delay mapped to DeliverAfter=%v props=%v", seenDelay, seenProps)
	}
	if seenProps[sluicepulsar.UUIDProperty] != "a" {
		t.Fatalf("UUID property = %q", seenProps[sluicepulsar.UUIDProperty])
	}
	bad := message.NewMessage("b", nil)
	bad.Metadata.Set("fail", "yes")
	err = pub.Publish("t", message.NewMessage("c", nil), bad)
	var pe *sluicepulsar.PublishError
	if !errors.As(err, &pe) || pe.Index != 1 || pe.UUID != "b" {
		t.Fatalf("Publish = %v, want a PublishError for #1", err)
	}
	malformed := message.NewMessage("d", nil)
	malformed.Metadata.Set(delay.DelayedForKey, "soon")
	if err := pub.Publish("t", malformed); err == nil {
		t.Fatal("a malformed delay was published")
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", message.NewMessage("e", nil)); err == nil {
		t.Fatal("Publish after Close succeeded")
	}
}
