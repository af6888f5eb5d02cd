package pulsartest

// Non-persistent topics ("non-persistent://tenant/namespace/topic") are
// served as Apache Pulsar serves them: nothing is stored. A message is
// handed at once to each subscription's consumer that has a permit (the
// next Shared consumer with one, or the active Exclusive/Failover
// consumer) and dropped for every subscription that has none — no
// consumer, or no FLOW permits yet. Its bytes are released as soon as it
// was written to the consumers. Nothing is redelivered: a negative ack, a
// closed consumer or a redelivery request drops the message. A
// subscription goes away with its last consumer, and there is no delayed
// delivery (deliver-at times are ignored).
//
// The log entry stays as an empty slot, so message ids keep their meaning
// for acknowledgements.

// dropUndelivered is called after entry id was appended and dispatched:
// every subscription that did not take it acknowledges it (dropped), and
// the entry's bytes are released. Caller holds b.mu.
func (t *topic) dropUndelivered(id uint64) {
	for _, s := range t.subs {
		if s.owner[id] == nil {
			s.ackEntry(id)
		}
	}
	t.entries[id].data = nil
}
