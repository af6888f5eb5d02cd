package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the MQTT 5 implementation of ports.Adapter. It is safe for
// concurrent use. Make one with New and Close it.
type Adapter struct {
	opts   Options
	url    string
	broker *embedded.Broker // when Options.Embedded
	pub    *autopaho.ConnectionManager
	pubID  string
	errs   *kit.Errors

	declared    kit.Declared  // DeclareTopic's record (retention at Send)
	instanceSet bool          // Options.Instance was given (DeclareGroup needs it)
	maxPacket   atomic.Uint32 // the sender's CONNACK Maximum Packet Size (0: none announced)

	// publishFault, when set (tests only), fails publishes before they are
	// written, as a refusing broker would.
	publishFault func(topic string) error
	// arrived, when set (tests only), observes every PUBLISH a
	// subscription's connection received, before any local handling.
	arrived func(id string, dup bool)

	mu        sync.Mutex
	closed    bool
	subs      map[*subscription]struct{}
	clientIDs map[string]bool // client ids of live subscriptions
	closeOnce sync.Once
	closeErr  error
}

var _ ports.Adapter = (*Adapter)(nil)

// New validates opts, starts the embedded broker when asked, connects the
// sender's connection and logs the adapter's capabilities. It returns once
// connected, or when ctx is done.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	instanceSet := opts.Instance != ""
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{opts: opts, url: opts.URL, errs: kit.NewErrors(64), instanceSet: instanceSet,
		subs: map[*subscription]struct{}{}, clientIDs: map[string]bool{}}
	if opts.Embedded {
		b, err := embedded.Start(embedded.Options{})
		if err != nil {
			return nil, err
		}
		a.broker, a.url = b, b.URL()
	}
	a.pubID = opts.Namespace + ":pub:" + opts.Instance + ":" + randomID()
	pub, err := a.connect(ctx, connSpec{clientID: a.pubID, cleanStart: true, errs: a.errs, onUp: a.senderUp})
	if err != nil {
		if a.broker != nil {
			_ = a.broker.Close()
		}
		return nil, err
	}
	a.pub = pub
	opts.Logger.Info("sluice mqtt adapter started", "broker", a.url, "namespace", opts.Namespace,
		"instance", opts.Instance, "capabilities", a.Capabilities().String())
	return a, nil
}

// Name is "mqtt".
func (a *Adapter) Name() string { return "mqtt" }

// Capabilities declares what MQTT 5 gives natively (see docs/adapters/mqtt.md).
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:     false, // local scheduler on the consumer
		DelayedRequeue:     false, // local scheduler on the consumer
		NativeDeadLetter:   false, // explicit "<ns>/<topic>/dlq" topic
		Broadcast:          true,  // a plain subscription per instance
		PerMessageAck:      false, // PUBACKs go out in arrival order
		PublisherConfirm:   true,  // QoS 1 PUBACK
		NativeBatch:        false, // adapter-side window in the core
		SubscriptionExpiry: true,  // session expiry interval
		// Kept in the group members' sessions: each member must come back
		// with its instance identity to receive the share parked for it.
		DurableGroups: true,
		// Exact while a subscription runs (across reconnects); after a
		// restart a redelivery (DUP) counts as at least 1.
		ExactRedeliveryCount: false,
		Ordering:             ports.OrderNone,
		// See topology.go and docs/adapters/mqtt.md.
		StartEarliest:      false, // no history: retained messages are one per topic
		SingleActive:       false, // shared subscriptions spread over every member
		BestEffort:         true,  // QoS 0
		Retention:          true,  // MQTT 5 Message Expiry Interval on every PUBLISH
		MaxLength:          false,
		MaxMessageBytes:    a.maxMessageBytes(),
		SizeCountsEnvelope: true, // the limit is the PUBLISH packet's
		// The broker hands a session to the newest connection with its
		// client id; the displaced one reports ErrInstanceShared.
		InstanceGuard: ports.InstanceDetected,
	}
}

// senderUp records the Maximum Packet Size the broker announced to the
// sender connection.
func (a *Adapter) senderUp(ca *paho.Connack) {
	if ca != nil && ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
		a.maxPacket.Store(*ca.Properties.MaximumPacketSize)
	}
}

// Errors reports the sender connection's errors (lost, reconnect
// failures). It is closed by Close. Subscriptions have their own.
func (a *Adapter) Errors() <-chan error { return a.errs.C() }

// Close stops every subscription (as Subscription.Stop: nothing is
// acknowledged), disconnects the sender and stops the embedded broker. It
// is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		subs := make([]*subscription, 0, len(a.subs))
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
		if err := a.pub.Disconnect(ctx); err != nil {
			errs = append(errs, fmt.Errorf("mqtt: disconnect sender: %w", err))
		}
		a.errs.Close()
		if a.broker != nil {
			if err := a.broker.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// publish sends p at QoS 1 on the sender connection and waits for the
// PUBACK. Reason codes below 0x80 (0 success, 16 no matching subscribers)
// confirm the publish; others, a lost connection or a missing PUBACK are
// ErrUnconfirmed; ctx errors are returned as they are.
func (a *Adapter) publish(ctx context.Context, p *paho.Publish) error {
	if a.publishFault != nil {
		if err := a.publishFault(p.Topic); err != nil {
			return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		}
	}
	for {
		resp, err := a.pub.Publish(ctx, p)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, autopaho.ConnectionDownError):
			// Not yet written: wait for the connection (bounded by ctx).
			if werr := a.pub.AwaitConnection(ctx); werr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, werr)
			}
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case resp != nil && resp.ReasonCode >= 0x80:
			reason := ""
			if resp.Properties != nil {
				reason = resp.Properties.ReasonString
			}
			return fmt.Errorf("%w: PUBACK reason code 0x%02x %s", ports.ErrUnconfirmed, resp.ReasonCode, reason)
		default:
			return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		}
	}
}
