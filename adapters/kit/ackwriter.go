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
// milliseconds. An ack error means the channel is lost: the broker
// redelivers what it did not get, and the driver sees the loss on its next
// receive. Safe for concurrent use; Stop ends the goroutine.
type AckWriter struct {
	mu        sync.Mutex // guards acks
	acks      CumulativeAcks
	interval  time.Duration
	threshold int
	due, full chan struct{} // to the writer: acks wait; threshold reached
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
}

// NewAckWriter starts the writer of ack (CumulativeAcks.Ack); threshold
// below 1 is 1.
func NewAckWriter(ack func(tag uint64, cumulative bool) error, interval time.Duration, threshold int) *AckWriter {
	w := &AckWriter{acks: CumulativeAcks{Ack: ack}, interval: interval, threshold: max(threshold, 1),
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

// Settle marks tags settled, without I/O, and returns how many were not
// handed out or were settled already; when some were, it settles none
// (see CumulativeAcks.Settle).
func (w *AckWriter) Settle(tags []uint64) (unknown int) {
	w.mu.Lock()
	unknown, ready := w.acks.Settle(tags)
	w.mu.Unlock()
	if ready > 0 {
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

// FlushIfFull flushes when window tags or more are out and some of them
// wait, settled, above an unsettled one: a broker that counts them against
// a prefetch of window would push nothing more.
func (w *AckWriter) FlushIfFull(window int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acks.Out() >= window && w.acks.Waiting() {
		return w.acks.Flush()
	}
	return nil
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
		_ = w.acks.AckSettled()
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
