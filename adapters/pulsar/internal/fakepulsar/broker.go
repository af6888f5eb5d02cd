// Package fakepulsar is an in-process model of the Pulsar broker behaviour
// the sluice adapter relies on, behind the client interfaces of
// pulsar-client-go (pulsar.Client, pulsar.Consumer, pulsar.Producer). It is
// NOT a Pulsar broker and speaks no wire protocol: it records every send,
// ack and nack, can inject failures, and models what the adapter's
// settlement depends on, as read from the broker and client sources:
//
//   - persistent topics; subscriptions created at the latest message and
//     kept (with their backlog) while no consumer is connected;
//   - Shared subscriptions dispatch round-robin to consumers with room in
//     their receiver queue (permits are returned as the application takes
//     messages off the queue);
//   - Ack/AckID/AckIDList acknowledge with a response; acking on a closed
//     consumer fails;
//   - Nack(msg) consults the consumer's NackBackoffPolicy (synchronously)
//     or NackRedeliveryDelay, and after that delay the message is
//     redelivered with its redelivery count + 1 (Shared only: Exclusive
//     subscriptions keep no count and rewind every unacknowledged message);
//   - a closed consumer's unacknowledged messages are redelivered to the
//     others without a count change; when the last consumer leaves, the
//     counts are cleared and the next consumer starts again from the oldest
//     unacknowledged message;
//   - DeliverAfter/DeliverAt is honoured on Shared subscriptions only, and
//     can be made to fire early (Broker.SetEarlyDelivery) as a broker with
//     delayedDeliveryDeliverAtTimeStrict=false does.
//
// Results obtained over it prove the adapter's mapping onto this model, not
// its behaviour against a real Pulsar.
package fakepulsar

import (
	"sort"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Op is the kind of an Event.
type Op string

// Recorded operations.
const (
	OpSend      Op = "send"      // a producer send (Err set when injected)
	OpAck       Op = "ack"       // one message acknowledged (Err set when injected)
	OpNack      Op = "nack"      // Nack/NackID called (Delay is the computed delay)
	OpRedeliver Op = "redeliver" // a nacked message went back to the subscription
	OpClose     Op = "close"     // a consumer closed
	OpUnsub     Op = "unsubscribe"
)

// Event is one recorded client call or broker action.
type Event struct {
	Op           Op
	Topic        string
	Subscription string
	ID           string // the "ce-id" property of the message, if any
	Entry        int    // the entry index (message id)
	Count        uint32 // redelivery count (OpRedeliver: the new count)
	Delay        time.Duration
	Batch        int // OpAck: how many message ids the acknowledging call carried
	Err          error
}

// Broker holds topics and subscriptions shared by every client made from
// it. Its zero value is not usable; call New.
type Broker struct {
	mu     sync.Mutex
	topics map[string]*topic
	events []Event
	early  time.Duration

	sendFault  func(topic string, m *pulsar.ProducerMessage) error
	ackFault   func(topic, subscription string) error
	subFault   func(opts pulsar.ConsumerOptions) error
	timers     map[*timer]struct{}
	timersDone sync.WaitGroup
	closed     bool
}

// New returns an empty broker.
func New() *Broker {
	return &Broker{topics: map[string]*topic{}, timers: map[*timer]struct{}{}}
}

// SetSendFault makes a send fail with the error f returns (nil: succeed).
// nil f removes the fault.
func (b *Broker) SetSendFault(f func(topic string, m *pulsar.ProducerMessage) error) {
	b.mu.Lock()
	b.sendFault = f
	b.mu.Unlock()
}

// SetAckFault makes acknowledgements fail with the error f returns.
func (b *Broker) SetAckFault(f func(topic, subscription string) error) {
	b.mu.Lock()
	b.ackFault = f
	b.mu.Unlock()
}

// SetSubscribeFault makes Subscribe fail with the error f returns.
func (b *Broker) SetSubscribeFault(f func(opts pulsar.ConsumerOptions) error) {
	b.mu.Lock()
	b.subFault = f
	b.mu.Unlock()
}

// SetEarlyDelivery dispatches delayed messages up to d before their
// deliver-at time (a non-strict broker). Default 0.
func (b *Broker) SetEarlyDelivery(d time.Duration) {
	b.mu.Lock()
	b.early = d
	b.mu.Unlock()
}

// Events returns a copy of the recorded events, oldest first.
func (b *Broker) Events() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.events...)
}

// Unacked returns the "ce-id" of every message of topic not acknowledged
// on subscription, in publish order (nil when the subscription is absent).
func (b *Broker) Unacked(topicName, subscription string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[topicName]
	if t == nil || t.subs[subscription] == nil {
		return nil
	}
	s := t.subs[subscription]
	ids := []string{}
	for i := s.start; i < len(t.entries); i++ {
		if !s.acked[i] {
			ids = append(ids, t.entries[i].props["ce-id"])
		}
	}
	return ids
}

// Subscriptions lists the subscriptions of a topic.
func (b *Broker) Subscriptions(topicName string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	if t := b.topics[topicName]; t != nil {
		for n := range t.subs {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// NewClient returns a client — one "process" — on this broker.
func (b *Broker) NewClient() pulsar.Client { return &client{b: b} }

// Close cancels pending timers (delayed deliveries and nack redeliveries)
// and waits for running ones. Clients should be closed first.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	for t := range b.timers {
		b.cancelLocked(t)
	}
	b.mu.Unlock()
	b.timersDone.Wait()
}

func (b *Broker) record(e Event) { b.events = append(b.events, e) }

// topicLocked returns the topic, creating it (auto topic creation).
func (b *Broker) topicLocked(name string) *topic {
	t := b.topics[name]
	if t == nil {
		t = &topic{name: name, subs: map[string]*subscription{}}
		b.topics[name] = t
	}
	return t
}

// publishLocked stores a message and dispatches it.
func (b *Broker) publishLocked(topicName, producer string, pm *pulsar.ProducerMessage) (*messageID, error) {
	if b.sendFault != nil {
		if err := b.sendFault(topicName, pm); err != nil {
			b.record(Event{Op: OpSend, Topic: topicName, ID: pm.Properties["ce-id"], Err: err})
			return nil, err
		}
	}
	t := b.topicLocked(topicName)
	now := time.Now()
	e := &entry{id: messageID{topic: topicName, entry: len(t.entries)}, key: pm.Key, producer: producer, published: now}
	e.payload = append([]byte(nil), pm.Payload...)
	e.props = make(map[string]string, len(pm.Properties))
	for k, v := range pm.Properties {
		e.props[k] = v
	}
	switch {
	case !pm.DeliverAt.IsZero():
		e.deliverAt = pm.DeliverAt
	case pm.DeliverAfter > 0:
		e.deliverAt = now.Add(pm.DeliverAfter)
	}
	t.entries = append(t.entries, e)
	b.record(Event{Op: OpSend, Topic: topicName, ID: e.props["ce-id"], Entry: e.id.entry})
	for _, s := range t.subs {
		b.dispatchLocked(s)
	}
	id := e.id
	return &id, nil
}

// timer is a cancellable callback run under b.mu.
type timer struct {
	t     *time.Timer
	owner *consumer // cancelled when the owner closes; nil for none
}

// afterLocked runs fn under b.mu after d unless cancelled first.
func (b *Broker) afterLocked(d time.Duration, owner *consumer, fn func()) {
	if b.closed {
		return
	}
	h := &timer{owner: owner}
	b.timersDone.Add(1)
	b.timers[h] = struct{}{}
	if owner != nil {
		owner.timers[h] = struct{}{}
	}
	h.t = time.AfterFunc(d, func() {
		defer b.timersDone.Done()
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, live := b.timers[h]; !live {
			return
		}
		delete(b.timers, h)
		if h.owner != nil {
			delete(h.owner.timers, h)
		}
		fn()
	})
}

// cancelLocked stops a timer that has not fired.
func (b *Broker) cancelLocked(h *timer) {
	if _, live := b.timers[h]; !live {
		return
	}
	delete(b.timers, h)
	if h.owner != nil {
		delete(h.owner.timers, h)
	}
	if h.t.Stop() {
		b.timersDone.Done()
	}
}
