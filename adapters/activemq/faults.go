package activemq

import (
	"errors"
	"slices"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// Faults are switches that make an adapter's publishes fail on purpose,
// for fault tests (tck.SendFaults, tck.DeadLetterFaults). A nil *Faults
// never fails anything.
type Faults struct {
	sends       atomic.Bool
	deadLetters atomic.Bool
}

// WithFaults returns o whose adapters obey f.
func WithFaults(o Options, f *Faults) Options {
	o.faults = f
	return o
}

// FailSends makes every Send abort its transaction instead of committing
// it (the broker stores nothing and Send reports ErrUnconfirmed) while
// fail is true.
func (f *Faults) FailSends(fail bool) { f.sends.Store(fail) }

// FailDeadLetters makes every publish to a dead-letter topic abort its
// transaction (the dead-letter copy is not stored, the original stays
// unacknowledged) while fail is true.
func (f *Faults) FailDeadLetters(fail bool) { f.deadLetters.Store(fail) }

// failing reports whether a transaction of msgs is to be aborted.
func (f *Faults) failing(msgs []ports.Message) bool {
	if f == nil {
		return false
	}
	return f.sends.Load() || f.deadLetters.Load() && slices.ContainsFunc(msgs, func(m ports.Message) bool { return isDeadLetterTopic(m.Topic) })
}

var errInjectedSend = errors.New("injected fault: the send transaction was aborted")
