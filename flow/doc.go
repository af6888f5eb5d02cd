// Package flow builds typed pipelines over channels whose terminal
// completion alone settles each broker delivery.
//
// A Pipeline consumes one subscription. Its Source is a Stream of
// deliveries; generic stages (Decode, Map, Filter, FlatMap, Via, Operate,
// Gather) turn it into streams of typed values, and a terminal Sink
// handles them.
// Every item carries a *Completion: the future that settles the delivery it
// came from, once everything derived from it has completed.
//
//	p := flow.New(adapter, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
//	orders := flow.Decode[Order](p.Source())
//	flow.Sink(orders, func(ctx context.Context, o Order) error { return bill(ctx, o) })
//	err := p.Run(ctx)
//
// # Settlement
//
// The terminal outcome decides the settlement, by the state machine of
// the settlement contract: its table is in the package documentation of
// ports and in docs/settlement.md, with how each outcome arises (decode
// errors are poison; another error is requeued until
// RetryPolicy.MaxAttempts deliveries have failed).
//
// A stage that drops an item completes it (Filter acks), a stage that fans
// an item out completes the input when every output completed (FlatMap,
// Completion.Split), a batch completes every member with its one outcome
// (Join), and a panic in user code becomes a *ports.PanicError.
//
// The goroutine that completes an item never talks to the broker: the
// pipeline's settlement engine gathers completions into rounds and settles
// each round with as few Subscription.Settle calls as the dispositions
// allow (all ACKs of a round in one call; a Join batch in one call), from
// its own goroutines (or, when the in-flight window is full and the round
// would go now, from the receive loop, which would only wait).
// WithSettleLinger, WithSettleBatch and WithSettleConcurrency tune it;
// docs/settlement.md describes it.
//
// # Exactly once
//
// Deliveries arrive at least once. A spec with QoS ports.ExactlyOnce is
// accepted when every Sink declared an exactly-once effect
// (ExactlyOnceEffect): inbox.Sink of operators/inbox commits the
// handler's SQL writes and the delivery's identity in one transaction
// before the ack. The adapter is subscribed at least once;
// docs/exactly-once.md is the guide.
//
// # Backpressure and stop
//
// At most SubscriptionSpec.InFlight deliveries are received and not yet
// settled: a delivery's slot is given back when the adapter accepted its
// settlement. Stop (or the end of Run) stops receiving, waits for in-flight
// work until its context is done, then cancels the rest; nothing completed
// after that is settled, and Stop itself never acks.
//
// # Context
//
// Each item's context carries the delivery's request id and tenant id
// (RequestID, TenantID) and the delivery (DeliveryFrom), so messages a
// handler sends with NewMessage or Send carry the request id on, with the
// causation and correlation ids set.
package flow
