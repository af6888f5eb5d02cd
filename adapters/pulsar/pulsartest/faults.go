package pulsartest

import "time"

// Fault hooks, in the spirit of kfake's control functions: a test decides
// what the broker does with the next SENDs, or cuts every connection
// (DropConnections in broker.go). Faults apply in this order: the queue
// filled by FailNextSends, DelayNextReceipts and WithholdNextReceipts (one
// queued fault per SEND, oldest first), then the ControlSend function.

// SendInfo describes one SEND the broker is about to store.
type SendInfo struct {
	// Topic is the full topic name, "persistent://tenant/namespace/topic".
	Topic string
	// Producer is the producer's name.
	Producer string
	// SequenceID is the producer's sequence id of the SEND.
	SequenceID uint64
	// NumMessages is the number of messages in the entry (a batch has more
	// than one).
	NumMessages int
}

// SendFault is what the broker does to one SEND. The zero value stores the
// message and answers at once.
type SendFault struct {
	// Fail refuses the SEND: nothing is stored and the client gets a
	// SEND_ERROR (PersistenceError). The Go client answers it by closing
	// the connection, reconnecting and sending the message again.
	Fail bool
	// Withhold stores the message but never sends its receipt: the send
	// stays unconfirmed on the client until it times out, is cancelled or
	// its connection drops (after which the client resends it, storing a
	// duplicate — the broker has no deduplication).
	Withhold bool
	// Delay stores the message at once (consumers may get it) but holds its
	// receipt for Delay. Every later frame on the same connection waits
	// behind it, as on a stalled link.
	Delay time.Duration
}

type faultState struct {
	queue   []SendFault
	control func(SendInfo) SendFault
}

// next returns the fault for one SEND. Caller holds b.mu.
func (f *faultState) next(info SendInfo) SendFault {
	if len(f.queue) > 0 {
		sf := f.queue[0]
		f.queue = f.queue[1:]
		return sf
	}
	if f.control != nil {
		return f.control(info)
	}
	return SendFault{}
}

func (b *Broker) queueFaults(n int, sf SendFault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range n {
		b.faults.queue = append(b.faults.queue, sf)
	}
}

// FailNextSends makes the next n SENDs (on any topic) fail with a
// SEND_ERROR without storing anything.
func (b *Broker) FailNextSends(n int) { b.queueFaults(n, SendFault{Fail: true}) }

// DelayNextReceipts stores the next n SENDs at once but holds each receipt
// for d.
func (b *Broker) DelayNextReceipts(n int, d time.Duration) { b.queueFaults(n, SendFault{Delay: d}) }

// WithholdNextReceipts stores the next n SENDs but never answers them.
func (b *Broker) WithholdNextReceipts(n int) { b.queueFaults(n, SendFault{Withhold: true}) }

// ControlSend installs fn to decide the fate of every SEND that no queued
// fault claims, until it is replaced; nil removes it. fn runs with the
// broker locked: it must be quick and must not call the Broker.
func (b *Broker) ControlSend(fn func(SendInfo) SendFault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults.control = fn
}

// ClearFaults drops queued faults and the ControlSend function.
func (b *Broker) ClearFaults() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = faultState{}
}
