package ports

import "context"

// TransactionalSubscriber is implemented by an adapter whose broker can
// commit a consumed position and produced messages in one transaction
// (Capabilities.TransactionalSend: Kafka). flow subscribes through it for a
// pipeline that ends in a transactional sink (flow.TransactSink); business
// code does not call it.
//
// SubscribeTransactional is Subscribe for such a pipeline: the returned
// subscription's Settle(Ack) commits, in one broker transaction per
// settlement round, the messages staged against the acknowledged deliveries
// and their consumed positions. An adapter without the capability returns
// an error wrapping ErrExactlyOnce.
type TransactionalSubscriber interface {
	SubscribeTransactional(ctx context.Context, spec SubscriptionSpec) (TransactionalSubscription, error)
}

// TransactionalSubscription is a Subscription that stages outgoing
// messages against a delivery.
//
// Stage validates and stamps msgs (as Send does) and holds them with d,
// which this subscription handed out and which is not settled yet; it does
// not publish. Settling d with Ack publishes them and commits d's position
// in one transaction, with the other deliveries of the same settlement
// round: a consumer that reads the output topics read-committed sees them
// exactly when d's position is committed, and never otherwise. Requeue and
// DeadLetter discard what was staged for d; so do a crash, Stop and a lost
// partition, after which d is redelivered. Settle(Ack) returns an error
// when the transaction failed: nothing of it is visible and the deliveries
// are redelivered. Stage may be called several times for one delivery (the
// messages add up), from several goroutines at once, and does not keep
// msgs (it copies what it holds). Every message must go to the
// subscription's own broker: Stage refuses a message it cannot make part of
// the transaction (a topic it cannot create) with an error.
type TransactionalSubscription interface {
	Subscription
	Stage(ctx context.Context, d *Delivery, msgs []Message) error
}
