package activemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/ports"
)

// TestFailedDeadLetterComesBackWithoutARestart: a dead-letter publish
// that failed leaves its original unacknowledged, and ActiveMQ hands an
// unacknowledged message out again only once its consumer's connection
// goes (a STOMP NACK would send it to the broker's own dead-letter
// queue). The subscription must give that connection up, so that the
// original comes back to the same running subscription and, the fault
// healed, reaches the dead-letter topic. Before, it stayed with the live
// connection until the subscription stopped.
func TestFailedDeadLetterComesBackWithoutARestart(t *testing.T) {
	f := &activemq.Faults{}
	a := newAdapter(t, activemq.WithFaults(activemq.Options{ReconnectBackoff: 20 * time.Millisecond}, f))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "abandon", Group: "g", InFlight: 4})
	dlq := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("abandon"), Group: "g-dlq", InFlight: 4})
	if err := a.Send(ctx, ports.Message{Topic: "abandon", Payload: []byte("x"), Headers: ports.NewHeaders(ports.HeaderID, "m1")}); err != nil {
		t.Fatal(err)
	}
	poison := ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("rejected by a business rule")}

	f.FailDeadLetters(true)
	first := recvOne(t, ctx, s, "the poison message")
	if err := s.Settle(ctx, []*ports.Delivery{first}, poison); err == nil {
		t.Fatal("Settle with DeadLetter succeeded while dead-letter publishes fail")
	}
	f.FailDeadLetters(false)
	again := recvOne(t, ctx, s, "the original of the failed dead letter, on the same subscription")
	if again.ID != "m1" {
		t.Fatalf("received %q, want m1 again", again.ID)
	}
	if err := s.Settle(ctx, []*ports.Delivery{again}, poison); err != nil {
		t.Fatalf("Settle with DeadLetter once the fault healed: %v", err)
	}
	if d := recvOne(t, ctx, dlq, "the dead letter"); d.ID != "m1" {
		t.Fatalf("dead letter %q, want m1", d.ID)
	}
	nothing(t, s, time.Second, "after the original was dead-lettered")
}
