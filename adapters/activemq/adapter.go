package activemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the ActiveMQ Classic adapter: STOMP 1.2 over go-stomp. It is
// safe for concurrent use.
type Adapter struct {
	opts     Options
	pub      *publisher
	declared kit.Declared // DeclareTopic's record (retention at Send)

	mu     sync.Mutex
	closed bool
	subs   map[*Subscription]struct{}
}

var _ ports.Adapter = (*Adapter)(nil)

// New connects to the broker (one publish connection, to fail fast with a
// clear error) and returns the adapter.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{opts: opts, subs: map[*Subscription]struct{}{}}
	a.pub = newPublisher(a)
	if err := a.pub.warm(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// Name returns "activemq".
func (a *Adapter) Name() string { return "activemq" }

// Capabilities declares what ActiveMQ does natively through this adapter:
//
//   - DelayedMessage, DelayedRequeue: AMQ_SCHEDULED_DELAY (the broker's
//     scheduler, which must be enabled: schedulerSupport="true").
//   - NativeDeadLetter: false — a dead letter is a copy this adapter
//     sends, confirmed, to the "<topic>.dlq" queue before it acknowledges
//     the original (ActiveMQ's own DLQ is driven by JMS client redelivery
//     counting, which STOMP has not).
//   - Broadcast, DurableGroups: virtual-topic consumer queues.
//   - PerMessageAck: ack:client-individual.
//   - PublisherConfirm: every Send is a transaction committed with a
//     receipt, persistent:true.
//   - SubscriptionExpiry: false — the broker removes only empty, inactive
//     queues (gcInactiveDestinations, a broker-wide setting) and STOMP
//     cannot delete a queue or give it a per-subscription TTL;
//     InstanceTTL is ignored.
//   - ExactRedeliveryCount: false — requeues carry an exact count, but a
//     message handed back by a lost consumer only says redelivered=true
//     (counted as one more).
//   - Ordering: none (requeued copies go to the back of the queue).
//   - StartEarliest: false — a group's queue holds only what arrived
//     after it was created.
//   - SingleActive: activemq.exclusive consumers (the broker fails over
//     to another consumer of the queue when the active one goes).
//   - BestEffort: persistent:false SENDs (memory only).
//   - Retention: the JMS expiration of every SEND (topology.go).
//   - MaxLength: false (broker policy, not reachable over STOMP).
//   - MaxMessageBytes: the adapter's 16 MiB bound on the payload.
//   - InstanceGuard: refused — a Broadcast subscription's connection
//     carries a client id the broker allows once (instance.go).
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:   true,
		DelayedRequeue:   true,
		Broadcast:        true,
		PerMessageAck:    true,
		PublisherConfirm: true,
		DurableGroups:    true,
		Ordering:         ports.OrderNone,
		SingleActive:     true,
		BestEffort:       true,
		Retention:        true,
		MaxMessageBytes:  MaxMessageBytes,
		InstanceGuard:    ports.InstanceRefused,
	}
}

// Send publishes msgs in one STOMP transaction on one of the publish
// connections (SEND persistent:true for each, then COMMIT with a receipt)
// and returns once the receipt arrived: the broker stored every message.
// Concurrent Sends pipeline their transactions over the connections. A
// failed commit fails every message of the call (none was stored).
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	fail := func(idx []int, err error) error {
		errs := make([]error, len(idx))
		for i, j := range idx {
			errs[i] = &ports.SendError{Index: j, Topic: msgs[j].Topic, Err: err}
		}
		return errors.Join(errs...)
	}
	all := make([]int, len(msgs))
	for i := range all {
		all[i] = i
	}
	if a.isClosed() {
		return fail(all, ports.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fail(all, err)
	}
	var bad []error
	var good []int
	out := make([]ports.Message, 0, len(msgs))
	now := time.Now()
	for i := range msgs {
		m := msgs[i]
		if err := m.Validate(); err != nil {
			bad = append(bad, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		if err := m.CheckSize(MaxMessageBytes, 0); err != nil {
			bad = append(bad, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		m.Stamp(now)
		out = append(out, m)
		good = append(good, i)
	}
	var err error
	if len(out) > 0 {
		if perr := a.pub.publish(ctx, out); perr != nil {
			err = fail(good, perr)
		}
	}
	return errors.Join(append(bad, err)...)
}

// Subscribe validates spec, opens the subscription's own connection,
// subscribes to its queue and returns once the broker processed the
// SUBSCRIBE (a receipt barrier), so a message sent afterwards reaches it.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if err := checkSubscription(spec); err != nil {
		return nil, err
	}
	if spec.Mode == ports.Broadcast && isDeadLetterTopic(spec.Topic) {
		return nil, fmt.Errorf("%w: BROADCAST of the dead-letter topic %q: on ActiveMQ a dead-letter topic is one queue whose consumers compete (subscribe with LOAD_BALANCE)", ports.ErrUnsupported, spec.Topic)
	}
	if spec.Mode == ports.Broadcast && spec.Instance == "" {
		spec.Instance = ports.NewID()
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ports.ErrClosed
	}
	a.mu.Unlock()
	s, err := newSubscription(ctx, a, spec)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = s.Stop(ctx)
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.mu.Unlock()
	return s, nil
}

func (a *Adapter) forget(s *Subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Close stops every subscription (their unsettled deliveries go back to
// the broker) and closes the publish connections. It is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*Subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.pub.close()
	return errors.Join(errs...)
}
