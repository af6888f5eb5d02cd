package pulsar

import (
	"sync"
	"sync/atomic"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
)

// requeueDelays gives each negative acknowledgement its own redelivery
// delay although the client configures nack delays per consumer.
//
// It is the consumer's NackBackoffPolicy. The client calls Next
// synchronously inside Consumer.Nack(msg) (negativeAcksTracker.AddMessage)
// and records the message for redelivery at now+Next(...). nack holds mu
// across the Nack call, so Next sees the delay of exactly that call. The
// client also calls Next(1) once when it creates a partition consumer, to
// size its tracker's tick (tick = Next(1)/3): outside a nack, Next returns
// the tick setting. A partition consumer created while a nack is in
// progress (only on partitioned topics, which the adapter does not create)
// would size its tick from that nack's delay instead; the 1ms floor keeps
// the ticker valid in that case.
type requeueDelays struct {
	tick    time.Duration
	mu      sync.Mutex   // serialises nack calls
	pending atomic.Int64 // the delay of the nack in progress, or -1
}

func newRequeueDelays(tick time.Duration) *requeueDelays {
	r := &requeueDelays{tick: tick}
	r.pending.Store(-1)
	return r
}

// Next implements pulsarclient.NackBackoffPolicy.
func (r *requeueDelays) Next(uint32) time.Duration {
	d := time.Duration(r.pending.Load())
	if d < 0 {
		return r.tick
	}
	return max(d, time.Millisecond)
}

// nack negatively acknowledges msg on c for redelivery no earlier than d.
// Consumer.Nack does not block on I/O: the client's tracker sends the
// redelivery request to the broker when the delay is over.
func (r *requeueDelays) nack(c pulsarclient.Consumer, msg pulsarclient.Message, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The client keys its nack deadlines by Unix milliseconds, cutting
	// off the rest: one millisecond more keeps the redelivery from coming
	// up to a millisecond before d (seen in the TCK under load).
	r.pending.Store(int64(max(d, 0) + time.Millisecond))
	defer r.pending.Store(-1)
	c.Nack(msg)
}

var _ pulsarclient.NackBackoffPolicy = (*requeueDelays)(nil)
