package kit

import (
	"sync"
	"time"
)

// AckWriter defers the acks of one channel of a broker with cumulative
// acks (CumulativeAcks) to a goroutine of its own, for a driver whose
// SendAcks must not wait for the broker (a driver.AckFlusher): Settle only
// records, and the writer acks the settled prefix with one cumulative ack
// within interval of a settlement, or at once when threshold tags are
// ready — the way a raw client acks every N deliveries or every few
// milliseconds; and while the driver's receive waits (Receiving) with the
// broker's prefetch window full and settled tags waiting above an
// unsettled one, it acks those singly within interval (the broker would
// push nothing more until it has them). An ack error means the channel is
// lost: the broker redelivers what it did not get, and the driver sees
// the loss on its next receive. Safe for concurrent use; Stop ends the
// goroutine.
type AckWriter struct {
	mu        sync.Mutex // guards acks
	acks      CumulativeAcks
	interval  time.Duration
	threshold int
	window    int           // the broker's prefetch; 0: unbounded
	receiving bool          // the driver's receive waits for deliveries
	due, full chan struct{} // to the writer: acks wait; threshold reached
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
}

// NewAckWriter starts the writer of ack (CumulativeAcks.Ack); threshold
// below 1 is 1; window is the broker's prefetch (0: unbounded).
func NewAckWriter(ack func(tag uint64, cumulative bool) error, interval time.Duration, threshold, window int) *AckWriter {
	w := &AckWriter{acks: CumulativeAcks{Ack: ack}, interval: interval, threshold: max(threshold, 1), window: window,
		due: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{})}
	w.done.Go(w.write)
	return w
}

// Add records a tag handed out, larger than every tag added before.
func (w *AckWriter) Add(tag uint64) {
	w.mu.Lock()
	w.acks.Add(tag)
	w.mu.Unlock()
}

// Receiving says whether the driver's receive waits for deliveries
// (true before it waits, false after). While it waits with the window
// full, the writer acks the settled tags that wait in it singly: only
// then, for a tag acked singly costs the broker nearly what a
// cumulative ack costs.
func (w *AckWriter) Receiving(waiting bool) {
	w.mu.Lock()
	w.receiving = waiting
	stuck := w.stuckLocked()
	w.mu.Unlock()
	if stuck {
		Signal(w.due)
	}
}

// stuckLocked says whether the receive waits with the window full and
// settled tags waiting in it (above an unsettled one, or not written
// yet).
func (w *AckWriter) stuckLocked() bool {
	return w.receiving && w.window > 0 && w.acks.Out() >= w.window && w.acks.Waiting()
}

// Settle marks tags settled, without I/O, and returns how many were not
// handed out or were settled already; when some were, it settles none
// (see CumulativeAcks.Settle).
func (w *AckWriter) Settle(tags []uint64) (unknown int) {
	w.mu.Lock()
	unknown, ready := w.acks.Settle(tags)
	stuck := w.stuckLocked()
	w.mu.Unlock()
	if ready > 0 || stuck {
		Signal(w.due)
	}
	if ready >= w.threshold {
		Signal(w.full)
	}
	return unknown
}

// Flush acks every settled tag now: the settled prefix with one
// cumulative ack, each tag settled above an unsettled one singly.
func (w *AckWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acks.Flush()
}

// Stop ends the writer and flushes what is settled. It is idempotent.
func (w *AckWriter) Stop() error {
	w.stopOnce.Do(func() { close(w.stop) })
	w.done.Wait()
	return w.Flush()
}

func (w *AckWriter) write() {
	writeDeferred(w.stop, w.due, w.full, w.interval, func() {
		w.mu.Lock()
		if w.stuckLocked() {
			_ = w.acks.Flush()
		} else {
			_ = w.acks.AckSettled()
		}
		w.mu.Unlock()
	})
}

// writeDeferred is the loop of a writer of deferred acknowledgements: it
// calls write within interval of a signal on due, at once on full (nil:
// never), until stop is closed.
func writeDeferred(stop, due, full <-chan struct{}, interval time.Duration, write func()) {
	wait := time.NewTimer(interval)
	defer wait.Stop()
	for {
		select {
		case <-stop:
			return
		case <-due:
		}
		wait.Reset(interval)
		select {
		case <-stop:
			return
		case <-wait.C:
		case <-full:
		}
		write()
	}
}
