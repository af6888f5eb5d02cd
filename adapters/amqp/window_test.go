package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/ports"
)

// TestPrefetchWindowIsNotHeldByAWaitingAck: with the prefetch window full,
// acks settled above a delivery still unacknowledged (here one whose
// requeue is held for its delay) cannot ride a cumulative ack; unless
// they are written singly, RabbitMQ counts them against the window and
// pushes nothing more. Before, they were written only when a receive
// began with the window full: a receive already waiting (for the one free
// slot) waited until the held delivery was settled, seconds later.
func TestPrefetchWindowIsNotHeldByAWaitingAck(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.DeclareTopic(ctx, ports.TopicSpec{Topic: "window", Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := a.Send(ctx, ports.Message{Topic: "window", Payload: []byte(fmt.Sprint(i)), Headers: ports.NewHeaders(ports.HeaderID, fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "window", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	var ds []*ports.Delivery
	for len(ds) < 4 {
		got, err := s.Receive(ctx, 4-len(ds))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	// The first one's requeue is held for a minute: it stays unacknowledged
	// on the channel, and its slot is free.
	if err := s.Settle(ctx, ds[:1], ports.Disposition{Action: ports.Requeue, Reason: errors.New("later"), Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	next := make(chan []*ports.Delivery, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		got, _ := s.Receive(rctx, 4)
		next <- got
	}()
	// Let the receive start waiting, then ack the other three.
	time.Sleep(200 * time.Millisecond) // the order under test, not a synchronisation of results
	if err := s.Settle(ctx, ds[1:], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	got := <-next
	if len(got) == 0 || got[0].ID != "m4" {
		t.Fatalf("received %d deliveries within 10s after three acks freed the window; want m4", len(got))
	}
}
