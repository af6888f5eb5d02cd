// Package ports is the business-facing Port of sluice: logical topics, the
// message envelope, the confirmed sender, subscription specs, capabilities
// and the adapter SPI that every broker adapter implements.
//
// Business code imports ports and flow only. Nothing here imports a broker
// client; adapters live under adapters/ and are selected by configuration.
//
// # Settlement
//
// Every inbound [Delivery] is settled exactly once, by the core, from the
// terminal completion of the pipeline that handled it (see package flow):
//
//	success            -> Ack
//	poison             -> DeadLetter (dead-letter publish confirmed, then the original settled)
//	other error        -> Requeue (redelivery count +1, bounded, then DeadLetter)
//	cancelled/pending  -> no settlement (the broker redelivers after the consumer stops)
//	conflicting second -> ErrConflict, no settlement
//
// Adapters never decide an outcome themselves; they carry out the
// [Disposition] the core hands to [Subscription.Settle].
//
// # Envelope
//
// Headers follow CloudEvents 1.0 (HTTP binary-mode names, "ce-" prefix) on
// every broker, W3C trace context for tracing ("traceparent",
// "tracestate"), and a "sluice-" prefix for transport facts that are not
// event attributes (redelivery count, dead-letter reason). See the Header*
// constants.
package ports
