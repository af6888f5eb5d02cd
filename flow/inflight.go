package flow

import (
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// inFlightNeed is the largest in-flight limit a stage asked for with
// NeedInFlight, and what the pipeline did about it.
type inFlightNeed struct {
	set    bool   // InFlight came from the caller, the adapter or a profile
	n      int    // the largest need, 0 for none
	stage  string // the stage that asked for n
	raised int    // the ports default that n replaced, 0 when not raised
}

// NeedInFlight tells the pipeline, before Start, that stage cannot work
// with fewer than n deliveries in flight: a batch of n items, for
// instance, is never filled when the pipeline lets fewer in, and every
// batch would wait out its window.
//
// When the in-flight limit is the ports default (the caller, the adapter's
// defaults and the profile all left SubscriptionSpec.InFlight zero), it is
// raised to n, Spec reports the raised limit and Start logs the raise at
// Info level. When the limit was set, Start fails with an error wrapping
// ports.ErrInvalid that names the stage: the limit the user chose is kept,
// never silently exceeded nor silently cutting the stage short.
//
// stage names the stage in the log line and the error (for example
// "operators.Batch"). Calls after Start have no effect.
func (p *Pipeline) NeedInFlight(n int, stage string) {
	if p.started || n <= p.spec.InFlight || n <= p.inFlight.n {
		return
	}
	p.inFlight.n, p.inFlight.stage = n, stage
	if p.inFlight.set {
		p.buildFail(fmt.Errorf("flow: %s: %w", stage, &ports.ValueError{
			Field:  "SubscriptionSpec.InFlight",
			Reason: fmt.Sprintf("%d is below the %d deliveries %s needs in flight: every batch would be cut short and wait out its window; raise InFlight to at least %d or leave it zero", p.spec.InFlight, n, stage, n),
		}))
		return
	}
	if p.inFlight.raised == 0 {
		p.inFlight.raised = p.spec.InFlight
	}
	p.spec.InFlight = n
}

// logInFlightRaise says at Start that NeedInFlight raised the limit.
func (p *Pipeline) logInFlightRaise() {
	if p.inFlight.raised == 0 {
		return
	}
	p.cfg.logger.Info("sluice: in-flight limit raised to fit a stage; set SubscriptionSpec.InFlight to choose it",
		"in_flight", p.spec.InFlight, "was", p.inFlight.raised, "stage", p.inFlight.stage,
		"topic", string(p.spec.Topic), "adapter", p.adapterName())
}
