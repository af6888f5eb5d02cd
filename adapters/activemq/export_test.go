package activemq

import (
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/ports"
)

// StompLogger gives the tests' raw go-stomp clients the adapter's routing
// of go-stomp's log lines (which go-stomp prints with the standard log
// package otherwise).
func StompLogger(l *slog.Logger) func(*stomp.Conn) error {
	return stomp.ConnOpt.Logger(stompLogger{l})
}

// Faults make an adapter's publishes fail on purpose, for fault tests
// (tck.SendFaults, tck.DeadLetterFaults): the transaction is aborted, each
// message fails with ports.ErrUnconfirmed.
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
	return f.sends.Load() || f.deadLetters.Load() &&
		slices.ContainsFunc(msgs, func(m ports.Message) bool { return isDeadLetterTopic(m.Topic) })
}
