// Package driver is the narrow interface a broker implements to become a
// sluice adapter. It maps one broker and nothing more: publish a batch
// with a per-message result, pull records, acknowledge a batch of
// handles, classify an error. Every cross-cutting rule of the settlement
// contract — the in-flight bound, double-settlement detection, counted
// requeue copies, the dead-letter publish confirmed before the original
// is settled, the delay fallback, reconnect with backoff, the Errors
// channel, Send stamping, validation and the size check, the identity
// rule, secret scrubbing and the capability log line — is written once,
// in package adapters/portable, which turns a Driver into the
// ports.Adapter that flow consumes. Business code never imports this
// package; it imports ports.
//
// # Required and optional
//
// [Driver] and [Subscription] are required. The optional interfaces are
// implemented only where the broker has the feature natively; the
// portable layer checks for them with a type assertion and otherwise
// applies its fallback:
//
//	interface           broker feature                      fallback in adapters/portable
//	Requeuer            native requeue (nack) with a count  confirmed copy with a counted header, then ack
//	RequeueCopier       a topic copied to every group       requeue copy sent through SendBatch
//	DeadLetterer        native dead-letter queue            confirmed copy to "<topic>.dlq", then ack
//	AckFlusher          deferred acks (offsets, coalesced)  none: SendAcks is synchronous
//	TopicDeclarer       create topics with properties       a per-process record (redeclare detection)
//	Dropper             a best-effort class that counts     SendAcks for a best-effort requeue or dead letter
//	GroupDeclarer       create a group's queue ahead        DeclareTopic refuses Groups it cannot keep
//	Reporter            events no call returns (lost link)  none: only receive failures reach Errors
//	Abandoner           redelivery needs the driver to act   a Requeuer's requeue, else handed out again locally
//	Transactor          produce and commit in one transaction  none: flow refuses transactional sinks (ErrExactlyOnce)
//
// Native delay on publish, native delayed requeue, expiry of idle
// per-instance subscriptions, instance exclusivity, a best-effort class,
// start positions and single-active groups are declared in
// [Driver.Capabilities] (ports.Capabilities) and honoured by the driver
// from the Message and SubscriptionSpec fields; what is not declared the
// portable layer refuses (StartEarliest, SingleActive) or falls back for
// (delay held on the consuming side, best-effort travelling at-least-once).
//
// # Concurrency and ownership
//
// Unless a method says otherwise: it may be called from several
// goroutines at once, it may block on broker I/O until ctx is done, it
// does not retry (the portable layer decides, using [Driver.Classify]),
// and it must not keep a slice it was given after it returns. Slices a
// driver returns belong to the caller.
//
// # Hand-offs on the consume path
//
// The portable layer pulls: flow's receive loop calls
// Subscription.ReceiveBatch itself, and on the default pipeline (stages
// of one worker, the Sink included) the handler runs on that same
// goroutine, so a record goes from ReceiveBatch to SendAcks through two
// sluice-owned goroutine hand-offs at most: (1) from the completion to
// flow's settlement engine, which coalesces completions into a round,
// and (2) from the engine to a settle worker, which calls SendAcks with
// the whole round. (2) is not taken for an [AckFlusher], whose SendAcks
// runs on the engine's goroutine, nor for a round that gathered while a
// call was running: the worker that finishes the call carries that round
// out itself, so that a busy pipeline's rounds go from one call to the
// next on one worker, the engine being woken only to time a round's
// linger. A stage with more workers (Workers, or a Buffer before it)
// adds a hand-off to its workers. When the in-flight window is full and
// the pending ACK round would go now, the receive loop carries it out
// itself (it would only wait for slots): no hand-off at all; for an
// AckFlusher it does so before any receive that would get less than half
// the window (so a driver whose reads carry the acks recorded gets them
// before it reads). The engine is the only acknowledgement batcher; a
// driver must not batch acknowledgements again behind SendAcks (it may
// defer them, see [AckFlusher]). Goroutines a broker client owns (a
// socket reader) and those a driver runs beside it (kafka's decode
// workers, which decode a poll's records per partition and hand them to
// ReceiveBatch in batches) are the driver's and are not counted.
package driver

import (
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Driver is one connection (or client) to a broker.
type Driver interface {
	// Name is a short broker name for logs ("mem", "amqp").
	Name() string

	// Capabilities declares what the broker does natively. It is constant
	// for the driver's life; the portable layer logs it once and applies
	// a fallback for every capability that is false.
	Capabilities() ports.Capabilities

	// SendBatch publishes msgs, in order, and returns once the broker
	// confirmed or refused each of them. It returns nil when all were
	// confirmed, or a slice of len(msgs) whose element i is nil when
	// msgs[i] was confirmed and the reason otherwise (classifiable with
	// Classify). The messages arrive validated and stamped; a message's
	// Delay is non-zero only when Capabilities().DelayedMessage is true.
	// On ctx cancellation it returns ctx.Err() for the unconfirmed ones.
	// It does not retry. It must not keep msgs or a Payload after it
	// returns (copy what the broker client keeps); each message's Headers
	// are the caller's when they were stamped already, otherwise a copy
	// the portable layer made for this call (stamped, or built for a
	// requeue or dead-letter copy): they may be kept, not changed (Clone
	// them first).
	SendBatch(ctx context.Context, msgs []ports.Message) []error

	// Subscribe creates or joins the physical subscription of spec (a
	// queue, a consumer group, a shared subscription) and returns once
	// it is established, so that a message sent afterwards reaches it.
	// spec is validated and defaulted; it asks only for what Capabilities
	// declares (the portable layer refuses the rest). A second running
	// Broadcast subscription with one Instance is refused with an error
	// matching ports.ErrInstanceShared where Capabilities.InstanceGuard
	// says so.
	Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (Subscription, error)

	// Classify says what an error returned by this driver means: its
	// portable code (ports.ErrRefused, ports.ErrAuth, …; nil when none
	// applies) and whether the same call may succeed if retried after a
	// reconnect. It is a pure function: safe for concurrent use, never
	// blocks. The portable layer wraps the error with the code, so that
	// errors.Is(err, code) holds for the caller.
	Classify(err error) Class

	// Close releases the connection. Subscriptions are closed before it
	// by the portable layer. It is called once and may block until ctx is
	// done.
	Close(ctx context.Context) error
}

// Class is an error's portable classification.
type Class struct {
	// Code is one of ports' portable codes (ErrRefused, ErrUnreachable,
	// ErrTimeout, ErrAuth, ErrTLS, ErrNotFound, ErrNoSubscriber,
	// ErrTooLarge, ErrClosed, ErrUnconfirmed), or nil.
	Code error
	// Retryable: the portable layer may retry the call after a backoff
	// (the driver reconnects on the next call); false makes the error
	// final for the caller.
	Retryable bool
}

// Record is one message pulled from the broker.
type Record struct {
	// Message as stored: Topic is the logical topic of the subscription,
	// Headers and Payload belong to the record (the portable layer may
	// remove transport headers from Headers).
	Message ports.Message
	// BrokerID is an identity the broker assigned, stable across
	// redeliveries ("" when the broker assigns none). The portable layer
	// applies the identity rule: the producer's HeaderID first, then
	// BrokerID, then none; so a driver may leave it "" for a record whose
	// headers carry HeaderID, and save building it.
	BrokerID string
	// RedeliveryCount is how often the broker delivered this message
	// before (exact or a bound, as Capabilities.ExactRedeliveryCount
	// says). Where requeues are copies, the portable layer adds the count
	// they carry, and a malformed one makes the record poison.
	RedeliveryCount int
	// Facts are broker facts for logs (queue, partition); shared and
	// read-only. A driver builds them with ports.NewFacts from a small
	// FactSource struct of the strings it has (ports.FactMap where the set
	// is open), so that no map is made per record.
	Facts ports.Facts
	// ReceivedAt is when the driver read the record (zero: the portable
	// layer stamps it), for a driver that reads the clock anyway.
	ReceivedAt time.Time
	// Handle is what SendAcks and the optional settlement methods receive
	// back for this record; it is opaque to the portable layer.
	Handle any
	// Err, when set, marks the record as poison (a malformed header): it
	// is handed to the core with Delivery.Err set.
	Err error
	// Decoded is the payload decoded by a Predecoder's decode (nil
	// without one); it becomes Delivery.Decoded.
	Decoded any
	// Lazy, set only after HeaderDeferrer.DeferHeaders, holds the
	// record's headers in the broker's record (Message.Headers is then
	// nil): the portable layer reads the identity from it and loads the
	// rest when the core asks (ports.HeaderDeferrer). A driver sets it
	// only for a record without the portable layer's transport headers
	// (LazyHeaders).
	Lazy LazyHeaders
}

// LazyHeaders are a record's headers left in the broker's record. The
// driver leaves a record's headers there only when none of them is a
// transport header of the portable layer's (kit.TransportHeader): those
// are read as the record arrives.
type LazyHeaders interface {
	// Lookup returns the last value of the header name, a string of its
	// own (it holds none of the record's memory).
	Lookup(name string) (string, bool)
	// Load returns every header, as Record.Message.Headers would hold
	// them, in a slice of their own.
	Load() ports.Headers
}

// HeaderDeferrer is implemented by a Subscription that can leave its
// records' headers in the broker's records (Record.Lazy) from
// DeferHeaders on (ports.HeaderDeferrer).
type HeaderDeferrer interface {
	DeferHeaders()
}

// Subscription is one running physical consumer.
type Subscription interface {
	// ReceiveBatch blocks until at least one record is available and
	// returns up to max of them (max >= 1). It is called from one
	// goroutine at a time. The portable layer bounds max by the
	// subscription's free in-flight slots, so a driver need not count
	// (it may set its broker prefetch to SubscriptionSpec.InFlight).
	// When ctx is done it returns ctx.Err() and no records, or records
	// and no error: a record pulled from the broker is never dropped on
	// cancellation. A broker failure is returned as it is; the portable
	// layer classifies it and retries a retryable one after a backoff,
	// reporting it on Errors. The caller reads the returned slice before
	// it calls ReceiveBatch again and does not keep it, so a driver may
	// reuse one slice for every call (the records' Headers, Payload and
	// Handle are kept: those must not be reused).
	ReceiveBatch(ctx context.Context, max int) ([]Record, error)

	// SendAcks removes the records of handles from the broker. It is
	// called with a whole settlement round (flow's engine batches;
	// the driver must not batch again) and may be called concurrently
	// with ReceiveBatch and with itself. It returns nil once the broker
	// accepted the acknowledgements, or — for an AckFlusher — once they
	// are recorded or written; on error none of them may be considered
	// acknowledged. It does not retry.
	SendAcks(ctx context.Context, handles []any) error

	// Close stops consuming and hands every unacknowledged record back to
	// the broker for redelivery; it acknowledges nothing. Called once,
	// after the last ReceiveBatch returned and no SendAcks is running; it
	// may block until ctx is done.
	Close(ctx context.Context) error
}

// ErrRecordsLost is wrapped by the error of SendAcks (or of another
// settlement method) when some of the handles are no longer valid: the
// broker took their records back with the channel or session that
// carried them (a RabbitMQ channel closed) and redelivers them, so they
// can never be settled. The portable layer frees their in-flight slots
// and reports the settlement as failed.
var ErrRecordsLost = errors.New("records lost with the channel that carried them; the broker redelivers them")

// Requeuer is implemented by a Subscription whose broker requeues
// natively and counts redeliveries (a Pulsar nack, a RocketMQ
// invisibility change, a RabbitMQ quorum-queue reject). SendRequeues
// returns the records to the broker for redelivery after delay (0: at
// once); it honours delay natively when Capabilities.DelayedRequeue is
// true and is only called with delay 0 otherwise. Concurrency, retries and
// ownership as SendAcks.
type Requeuer interface {
	SendRequeues(ctx context.Context, handles []any, delay time.Duration) error
}

// DeadLetterer is implemented by a Subscription whose broker
// dead-letters natively (a dead-letter exchange with publisher confirms,
// a native dead-letter topic). SendDeadLetters moves the records to the
// dead-letter destination with disp's reason and attempts, and returns
// nil only once that move is confirmed; on error the originals stay
// unsettled. Concurrency, retries and ownership as SendAcks.
type DeadLetterer interface {
	SendDeadLetters(ctx context.Context, handles []any, disp ports.Disposition) error
}

// RequeueCopier is implemented by a Subscription without a native requeue
// whose topic fans out to every group (an ActiveMQ virtual topic: a
// message sent to the topic is copied into each group's queue), so that a
// requeue copy sent to the topic would reach every group instead of the
// one that requeued. The portable layer then publishes its counted
// requeue copies (Requeuer absent) through SendRequeueCopies, which sends
// them to this subscription's own queue; dead-letter copies still go
// through Driver.SendBatch. Contract, results and ownership as
// Driver.SendBatch.
type RequeueCopier interface {
	SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error
}

// AckFlusher is implemented by a Subscription whose SendAcks defers the
// acknowledgements (Kafka offsets recorded for the next commit, acks
// written to a socket without a reply, Redis XACKs sent with the next
// read: kit.RidingAcks). Such a SendAcks must not wait for
// the broker: flow calls it one call at a time, on its settlement engine's
// own goroutine or on the receive loop (when less than half the in-flight
// window is free, or, for an AckCarrier, once a receive's deliveries were
// handed on).
// FlushAcks completes every acknowledgement SendAcks accepted before the
// call and returns when the broker has them or ctx is done; it is called
// before Close, and the driver also flushes on its own (on an interval, a
// rebalance) — gap-free where the broker commits positions.
type AckFlusher interface {
	FlushAcks(ctx context.Context) error
}

// AckCarrier is implemented by an AckFlusher whose reads send the
// acknowledgements SendAcks recorded ahead of the read, in its round trip
// (kit.RidingAcks): CarriesAcks reports true, and flow settles a
// receive's deliveries before the next receive (ports.AckCarrier).
type AckCarrier interface {
	CarriesAcks() bool
}

// Predecoder is implemented by a Subscription that fetches on goroutines
// of its own, one per stream (a Kafka partition's decode worker): it runs decode on
// each record's payload there and puts the result in Record.Decoded, so
// that the pipeline's decoding runs in parallel and off its receive loop
// (ports.Predecoder). decode is safe for concurrent use; Predecode may be
// called at any time, and records fetched before it have no Decoded.
type Predecoder interface {
	Predecode(decode func(payload []byte) any)
}

// TopicDeclarer is implemented by a Driver that creates a topic's
// physical resources with their properties (retention, length, groups).
// It is idempotent for one spec and returns a *ports.RedeclareError for a
// topic that exists with other properties (read back from the broker, or
// from a record of the driver's own). A driver without it gets the
// portable layer's per-process record and its groups declared through
// GroupDeclarer.
type TopicDeclarer interface {
	DeclareTopic(ctx context.Context, spec ports.TopicSpec) error
}

// GroupDeclarer is implemented by a Driver that can create a LoadBalance
// group's queue before its first consumer (see ports.GroupDeclarer). The
// portable layer validates topic and group before it calls DeclareGroup.
type GroupDeclarer interface {
	DeclareGroup(ctx context.Context, topic ports.Topic, group string) error
}

// Dropper is implemented by a Subscription whose broker has a native
// best-effort class and counts what it drops. On a best-effort
// subscription (SubscriptionSpec.QoS BestEffort, Capabilities.BestEffort)
// a Requeue or DeadLetter removes the records instead (a best-effort
// message is never requeued or dead-lettered); SendDrops removes them and
// counts them as dropped. Without it the portable layer acknowledges them
// with SendAcks. Concurrency, retries and ownership as SendAcks.
type Dropper interface {
	SendDrops(ctx context.Context, handles []any) error
}

// Abandoner is implemented by a Subscription whose broker redelivers a
// record left unsettled only once the driver acts: MQTT's PUBACKs go in
// arrival order, so one record held back holds back every later one on
// its connection until a new connection makes the broker send the
// unacknowledged again; RabbitMQ and ActiveMQ hand an unacknowledged
// message out again only when its channel or connection goes. A second
// after a settlement failed (not with ErrRecordsLost or
// ports.ErrSettleInDoubt), the portable layer calls Abandon with the
// handles of its records still unsettled then, claimed so that they are
// settled no more. It must not block, and the loss of a channel or a
// connection it closes is no fault: the next ReceiveBatch opens a new one
// without an error, and nothing goes to Reporter for it (the portable
// layer logs the hand-back at Info). A Subscription that is not an
// Abandoner but a Requeuer gets SendRequeues(handles, 0) instead, but for
// records at Capabilities.DeliveryLimit; for one that is neither, the
// portable layer hands the records out again itself.
type Abandoner interface {
	Abandon(handles []any)
}

// Reporter is implemented by a Subscription whose broker client learns of
// failures that no call returns — a connection lost and re-established
// by the client itself, a session taken over by another process. The
// portable layer calls SetReport once, right after Subscribe returned and
// before the first ReceiveBatch, with the function that reports an error
// on the subscription's Errors channel (scrubbed of secrets; it never
// blocks and drops reports after Close). Events before that call are the
// driver's to keep or drop.
type Reporter interface {
	SetReport(report func(error))
}

// Transactor is implemented by a Driver whose broker commits a consumed
// position and produced messages in one transaction (Kafka), declared with
// Capabilities.TransactionalSend. The portable layer turns it into
// ports.TransactionalSubscriber.
type Transactor interface {
	// SubscribeTransactional is Subscribe for a subscription that
	// publishes the messages staged against the acknowledged records and
	// commits their positions in one transaction: in SendAcks, or, for an
	// AckFlusher, later (on its own, and by FlushAcks), SendAcks only
	// recording them. A failed transaction leaves nothing of it visible,
	// none of its records acknowledged, and the broker redelivers them; its
	// error (wrapping ErrRecordsLost) is SendAcks' or, for an AckFlusher,
	// the next FlushAcks'.
	SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (TransactionalSubscription, error)
}

// TransactionalSubscription is the subscription of a Transactor.
type TransactionalSubscription interface {
	Subscription
	// Stage holds msgs (validated and stamped by the portable layer; the
	// driver may keep the messages and their Headers, not the slice, and
	// must not modify their Payloads)
	// until the record of handle is acknowledged or discarded; facts are
	// the Record.Facts the driver returned with it. It returns an error
	// wrapping ErrRecordsLost when the record can no longer be committed
	// (its partition was revoked), and refuses a message it cannot
	// produce. Concurrency as SendAcks.
	Stage(ctx context.Context, handle any, facts ports.Facts, msgs []ports.Message) error
	// Discard drops what was staged for handles: the portable layer calls
	// it before a requeue or a dead letter of those records. It does no
	// I/O.
	Discard(handles []any)
}

// ConnectError is err from a constructor's first connect as a
// *ports.BrokerError (Op "connect") with d's class of it, or err itself
// when d gives it no portable code.
func ConnectError(d interface{ Classify(error) Class }, err error) error {
	if cl := d.Classify(err); cl.Code != nil {
		return &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: err}
	}
	return err
}
