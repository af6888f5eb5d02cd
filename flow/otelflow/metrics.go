package otelflow

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Metric attribute keys of this package (besides the messaging.* ones).
const (
	AttrOutcome          = attribute.Key("sluice.outcome")            // succeeded, failed, poisoned, cancelled
	AttrDisposition      = attribute.Key("sluice.disposition")        // ACK, REQUEUE, DEAD_LETTER, none
	AttrDeadLetterReason = attribute.Key("sluice.dead_letter.reason") // decode, header, poison, panic, retries_exhausted
	AttrConfirmed        = attribute.Key("sluice.confirmed")          // producer: the broker confirmed
	AttrRedeliveryCount  = attribute.Key("sluice.redelivery_count")   // span attribute
	AttrSettleError      = attribute.Key("sluice.settle_error")       // the adapter failed the settlement
)

type instruments struct {
	inFlight    metric.Int64UpDownCounter
	settled     metric.Int64Counter
	redelivery  metric.Int64Histogram
	duration    metric.Float64Histogram
	deadLetters metric.Int64Counter
	produced    metric.Int64Counter
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var in instruments
	var errs [6]error
	in.inFlight, errs[0] = m.Int64UpDownCounter("sluice.consumer.in_flight",
		metric.WithDescription("Deliveries received and not yet completed."), metric.WithUnit("{delivery}"))
	in.settled, errs[1] = m.Int64Counter("sluice.consumer.settled",
		metric.WithDescription("Deliveries completed, by outcome and the disposition carried out."), metric.WithUnit("{delivery}"))
	in.redelivery, errs[2] = m.Int64Histogram("sluice.consumer.redelivery_count",
		metric.WithDescription("Redelivery count of each delivery received (0 on a first delivery)."), metric.WithUnit("{redelivery}"),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 3, 4, 5, 7, 10, 20, 50))
	in.duration, errs[3] = m.Float64Histogram("sluice.consumer.duration",
		metric.WithDescription("Time from receipt to settlement of a delivery: handler latency plus the settle call."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	in.deadLetters, errs[4] = m.Int64Counter("sluice.consumer.dead_letters",
		metric.WithDescription("Deliveries dead-lettered, by reason class."), metric.WithUnit("{delivery}"))
	in.produced, errs[5] = m.Int64Counter("sluice.producer.messages",
		metric.WithDescription("Messages sent through an instrumented sender, by whether the broker confirmed them."), metric.WithUnit("{message}"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return &in, nil
}

// deadLetterReason classifies why a delivery was dead-lettered, as a
// low-cardinality attribute value.
func deadLetterReason(o flow.Outcome) string {
	var (
		dec   *ports.DecodeError
		hdr   *ports.HeaderError
		panik *ports.PanicError
	)
	switch {
	case o.Kind == flow.Failed:
		// A failure dead-lettered is one that exhausted its retries.
		return "retries_exhausted"
	case errors.As(o.Err, &dec):
		return "decode"
	case errors.As(o.Err, &hdr):
		return "header"
	case errors.As(o.Err, &panik):
		return "panic"
	}
	return "poison"
}

func dispositionName(a ports.Action) string {
	if a == 0 {
		return "none"
	}
	return a.String()
}
