package activemq

import (
	"errors"
	"slices"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// Faults are switches that make an adapter's publishes fail on purpose,
// for fault tests (tck.SendFaults, tck.DeadLetterFaults): the transaction
// is aborted (ABORT with a receipt) instead of committed, so the broker
// stores nothing and each message fails with ports.ErrUnconfirmed. A nil
// *Faults fails nothing.
type Faults struct{ sends, deadLetters atomic.Bool }

// WithFaults returns o whose adapters obey f.
func WithFaults(o Options, f *Faults) Options {
	o.faults = f
	return o
}

// FailSends makes every publish fail while fail is true.
func (f *Faults) FailSends(fail bool) { f.sends.Store(fail) }

// FailDeadLetters makes every publish to a dead-letter topic fail while
// fail is true: a dead letter's original stays unacknowledged.
func (f *Faults) FailDeadLetters(fail bool) { f.deadLetters.Store(fail) }

func (f *Faults) failing(msgs []ports.Message) bool {
	return f != nil && (f.sends.Load() || f.deadLetters.Load() &&
		slices.ContainsFunc(msgs, func(m ports.Message) bool { return isDeadLetterTopic(m.Topic) }))
}

var errInjectedSend = errors.New("injected fault: the send transaction was aborted")
