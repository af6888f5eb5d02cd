package ports

import "context"

// Sender is the confirmed sender.
type Sender interface {
	// Send publishes msgs and returns only after the broker confirmed every
	// one of them (a publisher confirm, acks=all, a send receipt, a QoS 1
	// PUBACK). It returns nil only if all were confirmed; otherwise it
	// returns the *SendError of each unconfirmed message joined with
	// errors.Join (messages not named were confirmed). An unconfirmed
	// publish is an error, never a success.
	//
	// Send is safe for concurrent use and may block until confirmed or ctx
	// is done; on ctx cancellation it returns ctx.Err() (wrapped in
	// SendErrors) for the messages not yet confirmed — they may still reach
	// the broker. Send does not retry: the caller decides, knowing a retry
	// can duplicate. Send fills HeaderID, HeaderSpecVersion and HeaderTime
	// when missing and mirrors Message.Key into HeaderPartitionKey; it does
	// not keep msgs or their headers after it returns.
	Send(ctx context.Context, msgs ...Message) error
}

// Adapter is the SPI a broker adapter implements. Business code does not
// call it directly: it builds flow pipelines over it and sends through it.
type Adapter interface {
	Sender

	// Name is a short broker name for logs and test output ("mem", "amqp").
	Name() string

	// Capabilities declares what the broker does natively. It is constant
	// for the adapter's life and logged at start.
	Capabilities() Capabilities

	// Subscribe validates spec, creates or joins the physical subscription
	// (queue, consumer group, shared subscription) and starts receiving.
	// It blocks until the subscription is established on the broker, so
	// that a message sent after Subscribe returns is delivered to it.
	// Errors wrap ErrInvalid for a bad spec and ErrUnsupported for a mode
	// the broker cannot serve.
	Subscribe(ctx context.Context, spec SubscriptionSpec) (Subscription, error)

	// Close stops every subscription (as Subscription.Stop) and releases
	// connections. It is idempotent; later calls to Send and Subscribe
	// return ErrClosed. It blocks until done or ctx is done.
	Close(ctx context.Context) error
}

// Subscription is one running consumer of a SubscriptionSpec.
//
// The core calls Receive from one goroutine and Settle from many. The
// adapter never settles a delivery on its own: only Settle does, and only
// as told.
type Subscription interface {
	// Receive blocks until at least one delivery is available and returns
	// up to max of them (max >= 1). The adapter bounds what it prefetches by
	// SubscriptionSpec.InFlight; the core bounds what it asks for by the
	// same limit, so Receive is never called with more than InFlight
	// unsettled deliveries outstanding.
	//
	// It returns ctx.Err() when ctx is done, ErrClosed after Stop, and a
	// non-nil error for a broker failure the adapter could not recover
	// from (it recovers transient connection loss itself and surfaces it
	// through Errors). Deliveries returned belong to the caller until
	// settled.
	Receive(ctx context.Context, max int) ([]*Delivery, error)

	// Settle applies one disposition to every delivery in ds (a batch has
	// one outcome). It is safe for concurrent use, may block on broker I/O
	// and returns when the broker accepted the settlement — or, for a
	// settlement the protocol never answers (an AMQP ack, an MQTT PUBACK),
	// when it was written or queued for writing on the delivery's
	// connection; losing it with the connection means a redelivery, never a
	// loss. It does not
	// retry on its own beyond reconnecting: on error the deliveries' state
	// is unsettled and the broker will redeliver them. For DeadLetter it
	// publishes to the dead-letter topic with confirms first and settles
	// the originals only after that confirm; a failed dead-letter publish
	// returns an error and leaves the originals unsettled. ctx bounds the
	// call. After Stop it returns ErrClosed and settles nothing. It must
	// not keep ds.
	Settle(ctx context.Context, ds []*Delivery, d Disposition) error

	// Stop stops receiving and hands every unsettled delivery back to the
	// broker for redelivery (closing the consumer, not acking). Stop is
	// never an implicit success: it acks nothing. It is idempotent and
	// blocks until stopped or ctx is done.
	Stop(ctx context.Context) error

	// Errors reports asynchronous errors (connection lost, reconnected
	// with a failure, consumer cancelled by the broker). It is closed
	// after Stop. The core drains it and surfaces each error to the
	// caller; adapters must not block sending to it (drop and count when
	// full).
	Errors() <-chan error
}
