package activemq

import (
	"errors"
	"sync/atomic"
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

// FailDeadLetters makes every dead-letter settlement fail before its copy
// is sent (no dead letter, the original stays unacknowledged) while fail
// is true.
func (f *Faults) FailDeadLetters(fail bool) { f.deadLetters.Store(fail) }

func (f *Faults) sendsFailing() bool { return f != nil && f.sends.Load() }
func (f *Faults) deadLettersFailing() bool {
	return f != nil && f.deadLetters.Load()
}

var (
	errInjectedSend       = errors.New("injected fault: the send transaction was aborted")
	errInjectedDeadLetter = errors.New("injected fault: the dead-letter copy was not sent")
)
