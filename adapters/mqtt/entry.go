package mqtt

import (
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/ports"
)

// entryState is where a received message is in its local life.
type entryState int

const (
	stateReady    entryState = iota // queued for Receive
	stateOut                        // handed to the core, not settled
	stateWaiting                    // held by the scheduler (delay or requeue backoff)
	stateSettling                   // Settle is acknowledging or dead-lettering it
	stateAckOwed                    // settled, but its connection closed before the PUBACK: the redelivered copy is acknowledged on arrival
	stateDone                       // acknowledged
)

// entry is one message a subscription received and has not finished. It
// survives local redeliveries and reconnects: a copy the broker redelivers
// (DUP, same message id) updates the entry's ticket instead of being
// handed out a second time.
type entry struct {
	sub          *subscription
	id           string
	pub          *paho.Publish
	headers      ports.Headers
	ticket       ackTicket
	redeliveries int // deliveries made before the next one
	state        entryState
	out          *ports.Delivery // the delivery the core holds, in stateOut
	received     time.Time
	owedAt       int   // connection count when the PUBACK became owed
	malformed    error // an envelope header that did not decode: the core dead-letters it
}

// delivery builds the Delivery handed to the core for e's next attempt.
func (e *entry) delivery(topic ports.Topic) *ports.Delivery {
	h := e.headers
	if e.redeliveries > 0 {
		h = h.Clone() // the core may have kept the previous attempt's map
	}
	d := &ports.Delivery{
		Message:         ports.Message{Topic: topic, Key: h[ports.HeaderPartitionKey], Payload: e.pub.Payload, Headers: h},
		ID:              e.id,
		RedeliveryCount: e.redeliveries,
		ReceivedAt:      e.received,
		Err:             e.malformed,
		Handle:          e,
	}
	if e.id != "" {
		// Only the producer's ce-id user property: MQTT has no message id
		// of its own that survives a redelivery (the packet id is per
		// connection), so a message without it has no identity.
		d.IDSource = ports.IDProducer
	}
	return d
}
