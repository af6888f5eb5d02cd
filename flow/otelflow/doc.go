// Package otelflow instruments sluice pipelines and senders with
// OpenTelemetry traces and metrics.
//
//	tel, _ := otelflow.New(otelflow.WithTracerProvider(tp), otelflow.WithMeterProvider(mp))
//	sender := tel.Sender(adapter)                       // producer spans, traceparent in the envelope
//	p := flow.New(adapter, spec, tel.Option(adapter, spec)) // a consumer span and metrics per delivery
//	orders := flow.Decode[Order](otelflow.Trace(tel, p.Source())) // the span in each handler's ctx
//
// # Traces
//
// Sending through [Telemetry.Sender] starts a producer span per message,
// a child of the caller's span, and writes its W3C trace context into the
// envelope (ports.HeaderTraceParent, ports.HeaderTraceState) of a copy of
// the message. [Telemetry.Inject] writes the caller's own span context
// instead, as a flow.NewMessage option.
//
// Each delivery a pipeline receives gets a consumer span, "process
// <topic>", from its receipt until its settlement: it is a child of the
// producer span found in its envelope and also carries a link to it, so
// it stays connected where a backend draws traces by links only. The span
// records the outcome (succeeded, failed, poisoned, cancelled), the
// disposition carried out (ACK, REQUEUE, DEAD_LETTER, or none), the
// redelivery count, and the failure as a span error. Deliveries handled
// as a batch get their own span each as well, so every record of a batch
// stays in its producer's trace; [TraceBatch] and [Telemetry.StartBatch]
// add a span for the batch handler, linked to every member's span.
//
// The delivery span reaches the handler's context through the [Trace]
// stage (or [Telemetry.Context]), so spans the handler starts, and messages
// it sends, are its children.
//
// # Metrics
//
// Recorded per pipeline, with the attributes messaging.system,
// messaging.destination.name and messaging.consumer.group.name:
//
//	sluice.consumer.in_flight          deliveries received and not yet completed (up-down counter)
//	sluice.consumer.settled            completions, by sluice.outcome and sluice.disposition (counter)
//	sluice.consumer.redelivery_count   redelivery count of each delivery received (histogram)
//	sluice.consumer.duration           seconds from receipt to settlement: the handler latency plus the settle call (histogram)
//	sluice.consumer.dead_letters       dead letters, by sluice.dead_letter.reason (counter)
//	sluice.producer.messages           messages sent, by sluice.confirmed (counter)
//
// Dead-letter reasons are classes, never message text: decode, header,
// poison, panic, retries_exhausted.
//
// Nothing here logs or records payloads or header values other than the
// message id.
package otelflow
