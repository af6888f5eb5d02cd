package ports

import "context"

// TransactionalSubscriber is implemented by an adapter whose broker can
// commit a consumed position and produced messages in one transaction
// (Capabilities.TransactionalSend: Kafka). flow subscribes through it for a
// pipeline that ends in a transactional sink (flow.TransactSink); business
// code does not call it.
//
// SubscribeTransactional is Subscribe for such a pipeline: the returned
// subscription's Settle(Ack) has the messages staged against the
// acknowledged deliveries and their consumed positions committed in one
// broker transaction (Kafka: the commit round's, as Kafka offsets are). An adapter without the capability returns
// an error wrapping ErrExactlyOnce.
type TransactionalSubscriber interface {
	SubscribeTransactional(ctx context.Context, spec SubscriptionSpec) (TransactionalSubscription, error)
}

// TransactionalSubscription is a Subscription that stages outgoing
// messages against a delivery.
//
// Stage validates and stamps msgs (as Send does) and holds them with d,
// which this subscription handed out and which is not settled yet; it does
// not publish. Settling d with Ack has them published and d's position
// committed in one transaction, with other acknowledged deliveries: a
// consumer that reads the output topics read-committed sees them exactly
// when d's position is committed, and never otherwise. Requeue and
// DeadLetter discard what was staged for d; so do a crash, Stop and a lost
// partition, after which d is redelivered. When the transaction fails,
// nothing of it is visible and the deliveries are redelivered; the error
// is returned by Settle(Ack) or, where the subscription is a Flusher
// (Kafka) and Settle(Ack) only recorded the acknowledgement, reported on
// Errors and returned by the next Flush. Stage may be called several times for one delivery (the
// messages add up), from several goroutines at once, and does not keep
// msgs (it copies what it holds). Every message must go to the
// subscription's own broker: Stage refuses a message it cannot make part of
// the transaction (a topic it cannot create) with an error.
type TransactionalSubscription interface {
	Subscription
	Stage(ctx context.Context, d *Delivery, msgs []Message) error
}
