package amqp_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// A raw amqp091-go program and sluice on one RabbitMQ: sluice reads what
// the program publishes (the body; message-id, when set, as the identity;
// none without it), and the program reads what sluice publishes: the body
// as sent, message-id, content-type and type as AMQP properties and the
// rest of the envelope as string headers.
func TestInteropRawAMQP091(t *testing.T) {
	url := rabbittest.Shared(t).URL
	ns := namespace("interop")
	a := newAdapter(t, amqp.Options{URL: url, Namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("amqp091 to sluice", func(t *testing.T) {
		got := make(chan *ports.Delivery, 2)
		p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return nil })
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Stop(context.Background())
		for _, id := range []string{"legacy-1", ""} {
			if err := publishRaw(ctx, url, ns+".topics", "orders", []byte(`{"order":"`+id+`"}`), id); err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-got:
				want := ports.IDProducer
				if id == "" {
					want = ports.IDNone
				}
				if string(d.Payload) != `{"order":"`+id+`"}` || d.ID != id || d.IDSource != want || d.Err != nil {
					t.Fatalf("got payload %s ID %q (%s) err %v; want ID %q (%s)", d.Payload, d.ID, d.IDSource, d.Err, id, want)
				}
			case <-ctx.Done():
				t.Fatalf("sluice never received the raw message with message-id %q", id)
			}
		}
	})

	t.Run("sluice to amqp091", func(t *testing.T) {
		if err := a.DeclareTopic(ctx, ports.TopicSpec{Topic: "paid"}); err != nil {
			t.Fatal(err)
		}
		conn, err := amqp091.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "paid", ns+".topics", false, nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := ports.Message{Topic: "paid", Key: "o-1", Payload: []byte(`{"order":"o-1"}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-1", ports.HeaderType, "com.example.paid.v1", ports.HeaderContentType, "application/json")}
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-msgs:
			if string(d.Body) != `{"order":"o-1"}` || d.MessageId != "id-1" || d.Type != "com.example.paid.v1" || d.ContentType != "application/json" {
				t.Fatalf("amqp091 got body %s message-id %q type %q content-type %q", d.Body, d.MessageId, d.Type, d.ContentType)
			}
			// The envelope's four travel as properties; the message asked
			// for no other header, so the table carries the key's mirror
			// alone.
			if v, _ := d.Headers[ports.HeaderPartitionKey].(string); v != "o-1" || len(d.Headers) != 1 {
				t.Errorf("headers %v: want %s = o-1 alone besides the properties", d.Headers, ports.HeaderPartitionKey)
			}
			t.Logf("amqp091 consumer: message-id %q type %q content-type %q delivery-mode %d headers %v", d.MessageId, d.Type, d.ContentType, d.DeliveryMode, d.Headers)
		case <-ctx.Done():
			t.Fatal("the raw consumer never received sluice's message")
		}
	})
}
