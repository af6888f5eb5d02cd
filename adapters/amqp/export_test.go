package amqp

import (
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// Faults lets black-box tests make the broker refuse publishes: a refused
// publish is routed to a key nothing is bound to, with the mandatory
// flag, so RabbitMQ itself returns it and never confirms it.
type Faults struct{ sends, deadLetters atomic.Bool }

// WithFaults returns o wired to f.
func WithFaults(o Options, f *Faults) Options {
	o.testHook = func(m *ports.Message, it item) item {
		const faultKey = "~sluice-fault-unroutable"
		if dl := m.Headers.Get(ports.HeaderDeadLetterTopic); dl != "" && m.Topic == ports.DeadLetterTopic(ports.Topic(dl)) {
			if f.deadLetters.Load() {
				it.key = faultKey
			}
		} else if f.sends.Load() {
			// A delayed send too is published straight to the key, not
			// through its delay queue, which would confirm it and then
			// hold it for ever in the broker's dead-letter worker.
			it.exch, it.key, it.mandatory, it.delay = "", faultKey, true, 0
		}
		return it
	}
	return o
}

// FailSends makes Send publishes unroutable (true) or normal (false).
func (f *Faults) FailSends(on bool) { f.sends.Store(on) }

// FailDeadLetters makes dead-letter publishes unroutable (true) or normal.
func (f *Faults) FailDeadLetters(on bool) { f.deadLetters.Store(on) }
