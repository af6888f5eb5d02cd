package pulsar

import (
	"context"
	"fmt"
	"sync"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Subscription is one running Pulsar consumer of a SubscriptionSpec. It
// implements ports.Subscription; see that interface for the contract.
type Subscription struct {
	a        *Adapter
	spec     ports.SubscriptionSpec // defaults applied
	name     string                 // Pulsar subscription name
	consumer pulsarclient.Consumer
	delays   *requeueDelays
	// keep: Stop closes without unsubscribing (LOAD_BALANCE groups, and
	// BROADCAST instances with an InstanceTTL).
	keep bool

	held holdback // Receive's goroutine only

	mu       sync.Mutex
	stopping bool
	settling int           // Settle calls in progress
	idle     chan struct{} // closed when stopping and settling is 0
	done     chan struct{} // closed when Stop begins
	stopped  chan struct{} // closed when Stop has finished
	stopErr  error
	bg       sync.WaitGroup // ack calls outliving a cancelled Settle

	settler *kit.Settler
	errs    *kit.Errors

	timersMu sync.Mutex
	timers   map[*time.Timer]struct{} // delayed nacks of chunked messages
}

// handle is a delivery's settlement handle.
type handle struct {
	sub   *Subscription
	msg   pulsarclient.Message
	claim kit.Claim
}

// Receive implements ports.Subscription. It hands out what the client's
// receiver queue (sized InFlight) holds: it blocks for the first message,
// then takes up to max without blocking. A delayed message that arrived
// before its NotBeforeProperty time is held back until then.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	max = maxInt(max, 1)
	var out []*ports.Delivery
	for {
		select {
		case <-s.done:
			return nil, ports.ErrClosed
		default:
		}
		now := time.Now()
		if out = s.held.popDue(now, out, max); len(out) > 0 {
			return s.drain(out, max), nil
		}
		select {
		case cm, ok := <-s.consumer.Chan():
			if !ok {
				return nil, fmt.Errorf("pulsar: consumer of %s closed: %w", s.name, ports.ErrClosed)
			}
			if d := s.accept(cm.Message, time.Now()); d != nil {
				return s.drain(append(out, d), max), nil
			}
		case <-s.held.wait(now):
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
			return nil, ports.ErrClosed
		}
	}
}

// drain adds what is ready without blocking, up to max.
func (s *Subscription) drain(out []*ports.Delivery, max int) []*ports.Delivery {
	for len(out) < max {
		select {
		case cm, ok := <-s.consumer.Chan():
			if !ok {
				return out
			}
			if d := s.accept(cm.Message, time.Now()); d != nil {
				out = append(out, d)
			}
		default:
			return out
		}
	}
	return out
}

// accept turns msg into a delivery, or holds it back and returns nil when
// it arrived before its not-before time.
func (s *Subscription) accept(msg pulsarclient.Message, now time.Time) *ports.Delivery {
	if isProbe(msg) { // another best-effort Subscribe's (besteffort.go)
		s.consumer.Ack(msg)
		return nil
	}
	d := s.delivery(msg, now)
	at, err := notBefore(msg.Properties())
	if err != nil {
		// A foreign or corrupted guard: deliver now rather than guess, and
		// say so. The payload itself is not affected.
		s.report(fmt.Errorf("pulsar: message %s on %s: %w (delivered without the not-before guard)", d.ID, s.name, err))
		return d
	}
	if at.After(now) {
		s.held.push(at, d)
		return nil
	}
	return d
}

// delivery maps a received message onto a ports.Delivery.
func (s *Subscription) delivery(msg pulsarclient.Message, now time.Time) *ports.Delivery {
	h := headersOf(msg)
	mid := msg.ID().String()
	id, src := ports.IdentityFromHeaders(h)
	if id == "" {
		if id, src = h[UUIDProperty], ports.IDProducer; id == "" {
			id, src = "pulsar:"+mid, ports.IDBroker
		}
	}
	return &ports.Delivery{
		Message:         ports.Message{Topic: s.spec.Topic, Key: msg.Key(), Payload: msg.Payload(), Headers: h},
		ID:              id,
		IDSource:        src,
		RedeliveryCount: int(msg.RedeliveryCount()),
		Facts: map[string]string{
			"pulsar.topic":        msg.Topic(),
			"pulsar.subscription": s.name,
			"pulsar.message-id":   mid,
		},
		ReceivedAt: now,
		Handle:     &handle{sub: s, msg: msg},
	}
}

// Errors implements ports.Subscription. It carries what the adapter
// detects on its own (a malformed not-before guard) and the client's
// error-level log entries when the adapter created the client.
func (s *Subscription) Errors() <-chan error { return s.errs.C() }

// Dropped is the number of errors dropped because Errors was full (or
// reported after Stop).
func (s *Subscription) Dropped() int64 { return int64(s.errs.Dropped()) }

// report sends err to Errors without blocking.
func (s *Subscription) report(err error) { s.errs.Report(err) }

// enter registers a Settle call; false after Stop began.
func (s *Subscription) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.settling++
	return true
}

func (s *Subscription) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settling--; s.settling == 0 && s.stopping {
		close(s.idle)
	}
}

// Stop implements ports.Subscription. It stops Receive, waits (bounded by
// ctx) for Settle calls in progress, then closes the consumer: the broker
// redelivers every message not acknowledged. A BROADCAST instance without
// InstanceTTL is unsubscribed first, which deletes its copy. Stop never
// acknowledges anything. A second call waits for the first.
func (s *Subscription) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		select {
		case <-s.stopped:
			return s.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.stopping = true
	if s.settling == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
	close(s.done)

	var waitErr error
	select {
	case <-s.idle:
	case <-ctx.Done():
		waitErr = fmt.Errorf("pulsar: stop %s: settlements still in progress: %w", s.name, ctx.Err())
	}
	var err error
	if !s.keep {
		if uerr := s.consumer.Unsubscribe(); uerr != nil {
			err = fmt.Errorf("pulsar: unsubscribe broadcast instance %s: %w", s.name, uerr)
		}
	}
	s.stopTimers()
	s.consumer.Close()
	s.bg.Wait() // ack calls end once the consumer is closed
	s.a.forget(s)

	s.errs.Close()

	if waitErr != nil {
		err = waitErr
	}
	s.stopErr = err
	close(s.stopped)
	return err
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

var _ ports.Subscription = (*Subscription)(nil)
