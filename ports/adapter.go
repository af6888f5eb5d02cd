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
	// can duplicate. Send fills HeaderID when missing and mirrors
	// Message.Key into HeaderPartitionKey (Message.Stamp), and writes no
	// other envelope header of its own; it does not keep msgs or their
	// headers after it returns.
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
	// one outcome). It is safe for concurrent use and may block on broker
	// I/O; the core never calls it from a handler's goroutine (its
	// settlement engine coalesces completions and calls Settle from its
	// own goroutines, several calls at once, or from the receive loop
	// when the in-flight window is full and nothing else would run).
	//
	// Settle returns nil once the settlement is accepted, in one of two
	// ways, and the adapter documents which applies to each action:
	//
	//   - done: the broker answered (a Kafka OffsetCommit response, a
	//     confirmed dead-letter publish followed by the removal of the
	//     original, a STOMP COMMIT receipt);
	//   - deferred: the protocol answers later or never, and the adapter has
	//     recorded or written the settlement and will complete it on its
	//     own (a Kafka offset recorded now and committed on the next commit
	//     round; an AMQP basic.ack or an MQTT PUBACK written to the
	//     delivery's connection; a coalesced acknowledgement queued for the
	//     next flush). A deferred settlement that is lost (a crash, a lost
	//     connection, a revoked partition) makes the broker redeliver,
	//     never lose: the guarantee stays at-least-once. An adapter that
	//     defers implements Flusher, which the core calls before Stop.
	//     The core calls Settle(Ack) of a Flusher one call at a time, on
	//     its settlement engine's own goroutine or on the receive loop (see
	//     above), so such a Settle must not wait for the broker: it records
	//     or writes the acknowledgements and returns.
	//
	// Deferred acceptance is not an error: an adapter must not return one
	// for a settlement it will still complete. Settle does not retry on its
	// own beyond reconnecting: on error the deliveries' state is unsettled
	// and the broker will redeliver them. For DeadLetter it publishes to
	// the dead-letter topic with confirms first and settles the originals
	// only after that confirm; a failed dead-letter publish returns an
	// error and leaves the originals unsettled. ctx bounds the call. After
	// Stop it returns ErrClosed and settles nothing. It must not keep ds.
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

// ReceiveAppender is implemented by a Subscription that can hand its
// deliveries over in a slice the caller reuses from one receive to the
// next. ReceiveAppend is Receive, except that it appends the deliveries to
// dst and returns the extended slice (dst as it was, with an error). It
// must not keep dst. The core calls it, where a Subscription has it,
// instead of Receive, so that a receive costs no slice of its own.
type ReceiveAppender interface {
	ReceiveAppend(ctx context.Context, dst []*Delivery, max int) ([]*Delivery, error)
}

// Recycler is implemented by a Subscription that can reuse the memory of
// the deliveries it handed out. The core calls Recycle with deliveries it
// acknowledged (Settle with Ack returned nil) and that nothing outside the
// core can reach any more: no handler was given the *Delivery, its item or
// its completion (flow recycles only pipelines whose stages hand handlers
// decoded values, and only deliveries whose context did not give their
// *Delivery away, see flow.DeliveryFrom). The subscription may then hand
// the same *Delivery out again for another message. Recycle takes no
// delivery of another subscription and never fails; it must not keep ds.
type Recycler interface {
	Recycle(ds []*Delivery)
}

// HeaderDeferrer is implemented by a Subscription that can leave a
// delivery's Headers unread until they are asked for: after DeferHeaders
// (called before the first Receive) it may hand out deliveries whose
// Headers are nil while the broker's record still holds them, and
// LoadHeaders(d) fills them in. The core defers them only in a pipeline
// whose handlers see decoded values alone (the pipelines it recycles, see
// Recycler), and loads them before anything outside the core can read
// them (flow.DeliveryFrom, a handler's request or tenant id); the
// subscription loads them itself before it settles a delivery otherwise
// than with an ACK. A delivery's ID, RedeliveryCount, Key and Payload are
// never deferred. LoadHeaders is safe for concurrent use and does nothing
// for a delivery whose Headers are loaded, or another subscription's.
type HeaderDeferrer interface {
	DeferHeaders()
	LoadHeaders(d *Delivery)
}

// HeaderLookup is implemented by a HeaderDeferrer that can read one header
// of a delivery without loading the others: LookupHeader returns what
// d.Headers.Lookup(name) returns once they are loaded, and builds no
// string for a header d has not. The core reads the ids a handler's
// context answers (flow.RequestID, flow.TenantID, flow.NewMessage's) with
// it. It is safe for concurrent use; another subscription's delivery is
// read from its Headers.
type HeaderLookup interface {
	LookupHeader(d *Delivery, name string) (string, bool)
}

// Predecoder is implemented by a Subscription that can decode payloads
// where it fetches them, in parallel where the broker has parallel streams
// (a Kafka partition's goroutine), before Receive hands them out:
// flow.Decode on a pipeline's source asks for it, and the pipeline's
// receive loop is spared the decoding. decode is safe for concurrent use
// and keeps no payload; its result is the delivery's Decoded. A delivery
// fetched before the call has none (nil), and the pipeline decodes it.
type Predecoder interface {
	Predecode(decode func(payload []byte) any)
}

// AckCarrier is implemented by a Flusher whose Receive sends the ACKs
// recorded since its last one ahead of its read, in the same round trip
// (a Redis XACK pipelined with the next XREADGROUP), as a raw client
// acknowledges a batch with its next read. CarriesAcks reports whether
// it does (a wrapper answers for what it wraps). The core then settles
// the deliveries of a receive that its receive loop handled on the loop
// before its next Receive, instead of waking its settlement engine: that
// read carries their ACKs and gets their slots.
type AckCarrier interface {
	CarriesAcks() bool
}

// Flusher is implemented by a Subscription whose Settle defers some
// settlements (see Subscription.Settle): Flush completes every settlement
// accepted before the call — commits the recorded Kafka offsets, writes the
// queued acknowledgements — and returns when the broker has them or ctx is
// done. The core calls it once before Stop, after the last Settle; an
// adapter also flushes on its own on a rebalance or revoke and on an
// interval. Flush never settles a delivery that Settle was not asked to
// settle. A Flusher's Settle(Ack) must not wait for the broker (see
// Subscription.Settle): the core calls it one call at a time, on its
// settlement engine's own goroutine or on the receive loop.
type Flusher interface {
	Flush(ctx context.Context) error
}
