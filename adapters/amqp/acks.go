package amqp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// acker is the settlement side of one consumer channel. Every settlement
// the adapter carries out ends in a basic.ack (requeue and dead-letter ack
// the original after their confirmed publish), so the acker only acks.
//
// Acks are written by one goroutine (run), which coalesces: every tag
// settled since its last write that is older than every delivery still
// outstanding on the channel goes out as one multiple-ack of the highest
// such tag; tags behind an outstanding delivery are acked singly, since a
// multiple-ack would also ack the outstanding one.
//
// The writer does not write as soon as something is settled: it writes
// once half the prefetch is settled and unwritten (threshold), or when the
// oldest unwritten settlement is linger old, or at once when wait (Flush)
// or stop asks. On a quorum queue every ack frame is a Raft command, so
// one multiple-ack per half prefetch costs the broker what the best raw
// client costs it (one multiple-ack every k deliveries); writing as soon as
// woken gave one frame per ~5 deliveries. Half the prefetch keeps the
// broker delivering: the other half is still in flight while the ack
// travels. The multiple tag is
// always a tag not yet acked (RabbitMQ closes the channel on an unknown
// tag), and as the only writer the goroutine sends frames in the order it
// decided them.
//
// An AMQP ack has no reply, so there is no broker acceptance to wait for:
// settle hands the tags over and returns. A channel lost before or after
// the write loses the ack either way, and the broker redelivers the
// message (a duplicate, never a loss); the acker reports how many acks it
// could not write.
type acker struct {
	ack       func(tag uint64, multiple bool) error
	threshold int           // write once this many are pending
	linger    time.Duration // or once the oldest pending is this old

	mu   sync.Mutex
	out  []uint64 // outstanding tags (received, not settled), ascending, from hd
	hd   int
	pend []uint64      // settled, not yet written
	err  error         // the channel failed a write; nothing more is written
	lost int           // acks not written because of err
	busy bool          // run is writing a batch taken from pend
	idle chan struct{} // closed and replaced when run is done writing, if waited on
	// urgent: a waiter wants pend written now, not after the linger.
	urgent bool

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

// ackLinger bounds how long a settled ack waits for others to share its
// frame.
const ackLinger = 2 * time.Millisecond

// newAcker returns an acker for a channel with prefetch capacity.
func newAcker(ack func(tag uint64, multiple bool) error, capacity int) *acker {
	return &acker{
		ack:       ack,
		threshold: max(1, capacity/2),
		linger:    ackLinger,
		out:       make([]uint64, 0, capacity),
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// received registers delivery tags handed out by Receive, in the ascending
// order in which the channel delivered them.
func (a *acker) received(tags ...uint64) {
	a.mu.Lock()
	if a.hd > 0 && a.hd >= len(a.out)/2 {
		n := copy(a.out, a.out[a.hd:])
		a.out = a.out[:n]
		a.hd = 0
	}
	a.out = append(a.out, tags...)
	a.mu.Unlock()
}

// settle marks tags (outstanding, distinct) as settled and schedules their
// ack. It fails if the channel already failed a write.
func (a *acker) settle(tags ...uint64) error {
	a.mu.Lock()
	if a.err != nil {
		err := a.err
		a.mu.Unlock()
		return err
	}
	for _, t := range tags {
		a.remove(t)
	}
	before := len(a.pend)
	a.pend = append(a.pend, tags...)
	// The writer needs to know of the first pending ack (to start the
	// linger) and of the threshold; settlements in between only add to
	// the next frame.
	signal := before == 0 || len(a.pend) >= a.threshold
	a.mu.Unlock()
	if signal {
		a.signal()
	}
	return nil
}

func (a *acker) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// remove deletes t from the outstanding list.
func (a *acker) remove(t uint64) {
	live := a.out[a.hd:]
	if len(live) > 0 && live[0] == t {
		a.hd++
		return
	}
	j, found := slices.BinarySearch(live, t)
	if !found {
		return
	}
	copy(live[j:], live[j+1:])
	a.out = a.out[:len(a.out)-1]
}

// run writes acks until stop; it flushes what is pending before it exits.
func (a *acker) run() {
	defer close(a.done)
	var batch []uint64
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		select {
		case <-a.wake:
			a.mu.Lock()
			n, now := len(a.pend), a.urgent || len(a.pend) >= a.threshold || a.linger <= 0
			a.mu.Unlock()
			switch {
			case now:
				if armed {
					timer.Stop()
					armed = false
				}
				batch = a.flush(batch[:0])
			case n > 0 && !armed:
				timer.Reset(a.linger)
				armed = true
			}
		case <-timer.C:
			armed = false
			batch = a.flush(batch[:0])
		case <-a.quit:
			timer.Stop()
			a.flush(batch[:0])
			return
		}
	}
}

// flush writes the pending acks; batch is scratch space, returned for
// reuse.
func (a *acker) flush(batch []uint64) []uint64 {
	a.mu.Lock()
	if a.err != nil || len(a.pend) == 0 {
		a.mu.Unlock()
		return batch
	}
	batch = append(batch, a.pend...)
	a.pend = a.pend[:0]
	a.busy = true
	low := ^uint64(0)
	if a.hd < len(a.out) {
		low = a.out[a.hd]
	}
	a.mu.Unlock()

	slices.Sort(batch)
	i := 0
	for i < len(batch) && batch[i] < low {
		i++
	}
	var err error
	written := 0
	if i > 0 {
		if err = a.ack(batch[i-1], i > 1); err == nil {
			written = i
		}
	}
	for j := i; err == nil && j < len(batch); j++ {
		if err = a.ack(batch[j], false); err == nil {
			written++
		}
	}
	a.mu.Lock()
	if err != nil {
		a.err = fmt.Errorf("amqp: ack: %w", err)
		a.lost += len(batch) - written + len(a.pend)
		a.pend = a.pend[:0]
	}
	a.busy = false
	again := false
	if a.idle != nil && (len(a.pend) == 0 || a.err != nil) {
		close(a.idle)
		a.idle = nil
		a.urgent = false
	} else if a.urgent || len(a.pend) >= a.threshold {
		// Settled while this batch was written, and wanted now: a
		// waiter, or a full frame. (A signal sent during the write may
		// have found pend empty-then-refilled and already be queued;
		// one more is harmless.)
		again = len(a.pend) > 0
	}
	a.mu.Unlock()
	if again {
		a.signal()
	}
	return batch
}

// wait returns when every ack settled so far is written to the channel
// (or could not be: the channel's write error), or ctx is done.
func (a *acker) wait(ctx context.Context) error {
	for {
		a.mu.Lock()
		if a.err != nil {
			err := a.err
			a.mu.Unlock()
			return err
		}
		if len(a.pend) == 0 && !a.busy {
			a.mu.Unlock()
			return nil
		}
		if a.idle == nil {
			a.idle = make(chan struct{})
		}
		idle := a.idle
		a.urgent = true
		a.mu.Unlock()
		a.signal()
		select {
		case <-idle:
		case <-a.done:
			a.mu.Lock()
			n := len(a.pend)
			a.mu.Unlock()
			if n > 0 {
				return fmt.Errorf("amqp: ack: %d acks not written: the channel's ack writer stopped", n)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop flushes what is pending, stops the writer and returns how many acks
// could not be written (the broker redelivers those messages).
func (a *acker) stop() int {
	select {
	case <-a.quit:
	default:
		close(a.quit)
	}
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lost + len(a.pend)
}
