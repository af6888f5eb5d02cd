package activemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// A raw STOMP program and sluice on one ActiveMQ: sluice reads what the
// program sends (the body; the JMS message id as the identity), and the
// program reads what sluice sends: the body as sent, the envelope as
// STOMP headers under its own names, content-type as STOMP's.
func TestInteropRawSTOMP(t *testing.T) {
	addr := activemqtest.Shared(t).StompAddr
	ns := namespace("interop")
	a := newAdapter(t, activemq.Options{Addr: addr, Namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("STOMP to sluice", func(t *testing.T) {
		got := make(chan *ports.Delivery, 1)
		p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return nil })
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Stop(context.Background())
		if err := sendRaw(addr, "/topic/VirtualTopic."+ns+".orders", []byte(`{"order":"o-1"}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if string(d.Payload) != `{"order":"o-1"}` || d.ID == "" || d.ID != d.Facts.Get("message-id") || d.IDSource != ports.IDBroker || d.Err != nil {
				t.Fatalf("got payload %s ID %q (%s) facts %v err %v; want the body and the JMS message id (broker)", d.Payload, d.ID, d.IDSource, d.Facts, d.Err)
			}
		case <-ctx.Done():
			t.Fatal("sluice never received the raw STOMP message")
		}
	})

	t.Run("sluice to STOMP", func(t *testing.T) {
		c, err := stomp.Dial("tcp", addr, rawLog)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect()
		sub, err := c.Subscribe("/queue/Consumer.raw.VirtualTopic."+ns+".paid", stomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		// Frames are handled in order: once this receipt arrives the
		// SUBSCRIBE above has created the consumer queue.
		if err := c.Send("/queue/"+ns+".sync", "", []byte("sync"), stomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
		m := ports.Message{Topic: "paid", Key: "o-1", Payload: []byte(`{"order":"o-1"}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-1", ports.HeaderType, "com.example.paid.v1", ports.HeaderContentType, "application/json")}
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-sub.C:
			if msg.Err != nil {
				t.Fatal(msg.Err)
			}
			h := func(k string) string { return msg.Header.Get(k) }
			if string(msg.Body) != `{"order":"o-1"}` || h("ce-id") != "id-1" || h("ce-type") != "com.example.paid.v1" || msg.ContentType != "application/json" || h("persistent") != "true" {
				t.Fatalf("raw STOMP consumer got body %s content-type %q headers %v", msg.Body, msg.ContentType, msg.Header)
			}
			t.Logf("raw STOMP consumer: content-type %q headers %v", msg.ContentType, msg.Header)
		case <-ctx.Done():
			t.Fatal("the raw STOMP consumer never received sluice's message")
		}
	})
}
