package pulsar

import (
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
)

// MaxChunkedMessageBytes is the largest message Send accepts with
// WithChunking (and no WithMaxMessageBytes): 64 MiB, payload, key and
// properties. The bound is the adapter's, not the broker's: every chunk is
// a broker message under max_message_size, but the consumer holds a whole
// message in memory while it reassembles it (and up to 100 incomplete
// ones, the client's MaxPendingChunkedMessage), so the adapter keeps a
// message to a size a consumer can be expected to buffer. Set another
// bound with WithMaxMessageBytes.
const MaxChunkedMessageBytes = 64 << 20

// WithChunking makes the adapter's producers split a message larger than
// the broker's max_message_size into chunks (ProducerOptions.EnableChunking;
// batching is already off), each a broker message of its own, which the
// consumer reassembles before Receive hands it out. Send then accepts
// messages up to MaxChunkedMessageBytes (Capabilities.MaxMessageBytes says
// so) unless WithMaxMessageBytes sets another bound. URL parameter
// chunking=true.
//
// Hazard: with several consumers in one Shared subscription (several
// instances of a LOAD_BALANCE group) the broker may dispatch the chunks of
// one message to different consumers, and none can reassemble it. The
// client gives up an incomplete message after a minute (its
// ExpireTimeOfIncompleteChunk) without acknowledging its chunks, so the
// message is not lost but stranded: never handed out, held unacknowledged
// until a consumer of the subscription stops, then redelivered, and it can
// be split again. Use chunking where each subscription has one consumer:
// BROADCAST, or a LOAD_BALANCE group run by one instance.
// See docs/adapters/pulsar.md.
func WithChunking() Option {
	return optionFunc(func(c *config) error {
		c.chunking = true
		return nil
	})
}

// isChunked reports whether id is the id of a message the client
// reassembled from chunks. The client's chunk message id type is
// unexported; its String form (pulsar-client-go v0.19.0) is
// "<first chunk>;<last chunk>", which no other message id has.
func isChunked(id pulsarclient.MessageID) bool {
	return strings.Contains(id.String(), ";")
}

// nackChunked negatively acknowledges a reassembled message by every chunk,
// so the broker redelivers it whole: the client's Nack(msg) with a backoff
// policy (which the adapter sets) records only the last chunk's id, and the
// consumer would then discard that lone chunk. NackID of a chunk message id
// nacks every chunk, with the consumer's fixed nack delay (the requeue
// tick), so a longer delay is waited out here first: the redelivery comes
// no earlier than d. A timer still pending at Close is stopped; the broker
// redelivers the unacknowledged chunks to the next consumer anyway.
func (s *Subscription) nackChunked(msg pulsarclient.Message, d time.Duration) {
	// The client keys nack deadlines by whole Unix milliseconds (see
	// requeueDelays.nack): one more keeps the redelivery from coming up
	// to a millisecond before d.
	wait := d + time.Millisecond - s.a.cfg.requeueTick
	if wait <= 0 {
		s.consumer.NackID(msg.ID())
		return
	}
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	if s.timers == nil {
		s.timers = map[*time.Timer]struct{}{}
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		s.timersMu.Lock()
		_, live := s.timers[t]
		delete(s.timers, t)
		s.timersMu.Unlock()
		if live {
			s.consumer.NackID(msg.ID())
		}
	})
	s.timers[t] = struct{}{}
}

// stopTimers stops the pending delayed chunk nacks (at Close).
func (s *Subscription) stopTimers() {
	s.timersMu.Lock()
	defer s.timersMu.Unlock()
	for t := range s.timers {
		t.Stop()
	}
	s.timers = nil
}
