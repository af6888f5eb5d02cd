package kit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// RidingAcks defers the acknowledgements of a subscription whose broker
// takes them record by record on a request the driver can send in one
// round trip with its next read (a Redis XACK pipelined ahead of the
// XREADGROUP), the way a raw client acknowledges a batch with its next
// read. Embedded with H any, it is the driver's SendAcks, which only
// records, and FlushAcks (a driver.AckFlusher). The driver's next read
// takes what is pending ([RidingAcks.Take]), sends it ahead of the read
// and hands the batch back with its outcome ([RidingAcks.Done]). A writer
// goroutine sends, with send, what no read took within interval of its
// settlement (a consumer waiting in a blocking read); FlushAcks sends the
// rest at once and returns its failure. A failure nobody waits for (a
// read's, the writer's) goes to report. A failed batch's records stay
// with the broker, which delivers them again.
//
// H is the driver's record handle. Safe for concurrent use; Stop ends the
// writer.
type RidingAcks[H any] struct {
	send     func(ctx context.Context, hs []H) error
	report   func(err error)
	interval time.Duration

	mu      sync.Mutex
	pending []H
	spare   []H           // a batch handed back, its storage reused
	riding  int           // batches taken and not handed back
	idle    chan struct{} // closed when riding falls to 0 and FlushAcks waits

	due      chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// NewRidingAcks starts the writer, which sends with send what no read took
// within interval.
func NewRidingAcks[H any](send func(ctx context.Context, hs []H) error, report func(err error), interval time.Duration) *RidingAcks[H] {
	a := &RidingAcks[H]{send: send, report: report, interval: interval, due: make(chan struct{}, 1), stop: make(chan struct{})}
	a.done.Go(a.write)
	return a
}

// SendAcks defers the acknowledgement of hs, without I/O (it keeps no
// reference to the slice).
func (a *RidingAcks[H]) SendAcks(_ context.Context, hs []H) error {
	a.mu.Lock()
	if a.pending == nil {
		a.pending, a.spare = a.spare[:0], nil
	}
	a.pending = append(a.pending, hs...)
	a.mu.Unlock()
	Signal(a.due)
	return nil
}

// Take returns what is pending, for the driver's next request, or nil.
// The driver sends it and calls Done with it and the outcome.
func (a *RidingAcks[H]) Take() []H {
	a.mu.Lock()
	defer a.mu.Unlock()
	hs := a.pending
	a.pending = nil
	if len(hs) > 0 {
		a.riding++
	}
	return hs
}

// Done hands back a batch Take returned, with the error its request
// ended with, which goes to report.
func (a *RidingAcks[H]) Done(hs []H, err error) {
	if err != nil {
		a.report(fmt.Errorf("acknowledging %d records (those the broker did not get are delivered again): %w", len(hs), err))
	}
	a.landed(hs)
}

// landed hands back a batch taken.
func (a *RidingAcks[H]) landed(hs []H) {
	a.mu.Lock()
	a.riding--
	clear(hs)
	a.spare = hs
	if a.riding == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// CarriesAcks reports that the driver's reads carry the acknowledgements
// (driver.AckCarrier).
func (a *RidingAcks[H]) CarriesAcks() bool { return true }

// FlushAcks sends what is pending and waits for the batches reads took,
// so that every acknowledgement recorded before the call was sent when it
// returns; it returns the send's error, or ctx's once it is done.
func (a *RidingAcks[H]) FlushAcks(ctx context.Context) error {
	var err error
	if hs := a.Take(); len(hs) > 0 {
		err = a.send(ctx, hs)
		a.landed(hs)
	}
	for {
		a.mu.Lock()
		if a.riding == 0 {
			a.mu.Unlock()
			return err
		}
		if a.idle == nil {
			a.idle = make(chan struct{})
		}
		idle := a.idle
		a.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

// Stop ends the writer; what is pending stays pending (FlushAcks sends
// it). It is idempotent.
func (a *RidingAcks[H]) Stop() {
	a.stopOnce.Do(func() { close(a.stop) })
	a.done.Wait()
}

// write sends what no read took within interval of its settlement.
func (a *RidingAcks[H]) write() {
	writeDeferred(a.stop, a.due, nil, a.interval, func() {
		if hs := a.Take(); len(hs) > 0 {
			a.Done(hs, a.send(context.Background(), hs)) // bounded by the client's timeouts
		}
	})
}
