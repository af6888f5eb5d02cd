package amqp

// Faults lets black-box tests make the broker refuse publishes: a
// refused publish is routed to a key nothing is bound to, with the
// mandatory flag, so RabbitMQ itself returns it and never confirms it.
type Faults struct{ f faults }

// WithFaults returns o wired to f.
func WithFaults(o Options, f *Faults) Options {
	o.faults = &f.f
	return o
}

// FailSends makes Send publishes unroutable (true) or normal (false).
func (f *Faults) FailSends(on bool) { f.f.sends.Store(on) }

// FailDeadLetters makes dead-letter publishes unroutable (true) or normal.
func (f *Faults) FailDeadLetters(on bool) { f.f.deadLetters.Store(on) }
