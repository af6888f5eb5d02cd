package flow

import (
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// ExactlyOnceEffect declares that a terminal Sink's effect happens exactly
// once per message even though its deliveries arrive at least once. A
// Sink that carries it promises, for every item:
//
//   - the item carries exactly one delivery (Item.Msg is not nil), and the
//     Sink refuses any other (a batch, a Join, a part of a Split) loudly;
//   - the effect and a record of the delivery's identity (ports.Delivery.ID)
//     commit atomically, before the item succeeds, so the ACK follows the
//     commit;
//   - a delivery whose identity is already recorded succeeds without a
//     second effect;
//   - a delivery without identity is never handled twice silently.
//
// A pipeline whose SubscriptionSpec asks for ports.ExactlyOnce starts only
// when every Sink carries this option and no FlatMap precedes one (see
// Pipeline.Start). inbox.Sink (operators/inbox) sets it; other sinks
// should not, unless they keep that promise.
func ExactlyOnceEffect() StageOption {
	return func(c *stageConfig) { c.exactlyOnce = true }
}

// sinkInfo is what Start needs to know of a terminal Sink.
type sinkInfo struct {
	exactlyOnce   bool
	transactional bool   // TransactSink (transact.go)
	fanOut        string // the fan-out stage before it, if any
}

// terminal records a Sink for the exactly-once check of Start.
func (p *Pipeline) terminal(fanOut string, exactlyOnce bool) {
	p.sinks = append(p.sinks, sinkInfo{exactlyOnce: exactlyOnce, fanOut: fanOut})
}

// exactlyOnceSpecs returns the specs Start validates and subscribes with.
// For QoS ExactlyOnce the pipeline must end only in exactly-once sinks
// (ExactlyOnceEffect); the transport then stays at least once (the
// adapter is subscribed with AtLeastOnce) and the effect is exactly once.
// Otherwise the error wraps ports.ErrExactlyOnce and names the sink.
func (p *Pipeline) exactlyOnceSpecs() (raw, spec ports.SubscriptionSpec, err error) {
	raw, spec = p.raw, p.spec
	if raw.QoS != ports.ExactlyOnce && spec.QoS != ports.ExactlyOnce {
		return raw, spec, nil
	}
	if len(p.sinks) == 0 {
		return raw, spec, fmt.Errorf("flow: QoS ExactlyOnce needs a terminal Sink with an exactly-once effect (inbox.Sink of operators/inbox); this pipeline has none: %w", ports.ErrExactlyOnce)
	}
	for i, s := range p.sinks {
		switch {
		case !s.exactlyOnce:
			return raw, spec, fmt.Errorf("flow: QoS ExactlyOnce: Sink %d of %d has no exactly-once effect: end the pipeline with inbox.Sink (operators/inbox), which commits the effect and the delivery's identity in one database transaction, or subscribe with AtLeastOnce: %w", i+1, len(p.sinks), ports.ErrExactlyOnce)
		case s.fanOut != "":
			return raw, spec, fmt.Errorf("flow: QoS ExactlyOnce: Sink %d of %d follows %s, which makes several items of one delivery; an exactly-once Sink records each delivery once: handle the parts inside the Sink's function instead: %w", i+1, len(p.sinks), s.fanOut, ports.ErrExactlyOnce)
		}
	}
	raw.QoS, spec.QoS = ports.AtLeastOnce, ports.AtLeastOnce
	return raw, spec, nil
}
