package portable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Subscription is a ports.Subscription over a driver.Subscription.
type Subscription struct {
	a       *Adapter
	ds      driver.Subscription
	spec    ports.SubscriptionSpec
	settler *kit.Settler
	delayer *kit.Delayer // delayed requeues and not-before holds, on the adapter's scheduler; nil where the broker delays both
	errs    *kit.Errors
	copies  bool // requeues are republished copies counted in HeaderRedeliveryCount
	// group names the subscription's group in the requeue copies it
	// republishes to its topic (kit.AddressCopies): the other groups that
	// read the topic pass over them, having handled the original.
	group string

	recvMu sync.Mutex  // held by Receive: Stop waits for it before closing the driver
	chunk  []received  // deliveries not handed out yet (take); under recvMu
	reuse  []*received // given back by Recycle, taken by take; under recvMu
	backMu sync.Mutex
	back   []*received  // given back by Recycle since take last looked; under backMu
	gate   sync.RWMutex // read-held by Settle, write-held by Stop

	mu         sync.Mutex
	out        atomic.Int64       // deliveries handed out and not settled: the in-flight bound
	needRoom   atomic.Bool        // Receive waits for a settlement to free a slot
	closing    atomic.Bool        // stopped, readable without mu
	ready      []*ports.Delivery  // held deliveries now due
	rparent    context.Context    // the ctx rctx was derived from
	rctx       context.Context    // passed to ReceiveBatch, reused until cancelled
	cancelRecv context.CancelFunc // cancels rctx: interrupts a driver ReceiveBatch
	stopped    bool
	room       chan struct{} // capacity 1: a slot was freed or a hold fell due
	done       chan struct{} // closed by Stop
}

var (
	_ ports.Subscription    = (*Subscription)(nil)
	_ ports.ReceiveAppender = (*Subscription)(nil)
	_ ports.Predecoder      = (*Subscription)(nil)
	_ ports.HeaderDeferrer  = (*Subscription)(nil)
	_ ports.HeaderLookup    = (*Subscription)(nil)
)

// handle is a delivery's Delivery.Handle: its settlement claim, the
// driver's handle and the subscription that handed it out.
type handle struct {
	claim kit.Claim
	h     any
	sub   *Subscription
	r     *received    // holds the delivery it was handed out with (not a copy)
	freed atomic.Bool  // its in-flight slot was given back
	lazy  kit.Deferred // headers left in the driver's record (ports.HeaderDeferrer)
}

// Settlement misuse errors, the same on every adapter. Both wrap
// ports.ErrInvalid: the core settles each delivery once, on the
// subscription that received it, so either points at a bug in the caller.
var (
	// ErrAlreadySettled is returned by Settle for a delivery that was
	// settled already, or whose settlement is under way in another call;
	// it also matches ports.ErrAlreadyCompleted (the same action) or
	// ports.ErrConflict (another one). Nothing is settled.
	ErrAlreadySettled = fmt.Errorf("%w: delivery already settled", ports.ErrInvalid)
	// ErrForeignDelivery is returned by Settle for a delivery that this
	// subscription did not hand out (another subscription's, one built or
	// copied by hand, nil). Nothing is settled.
	ErrForeignDelivery = fmt.Errorf("%w: delivery was not received from this subscription", ports.ErrInvalid)
)

func newSubscription(a *Adapter, ds driver.Subscription, spec ports.SubscriptionSpec) *Subscription {
	s := &Subscription{a: a, ds: ds, spec: spec, errs: kit.NewErrors(16), room: make(chan struct{}, 1), done: make(chan struct{})}
	_, native := ds.(driver.Requeuer)
	// A broker with a delivery limit gets a copy of what reaches it.
	s.copies = !native || a.caps.DeliveryLimit > 0
	// A broadcast instance is a group of its own.
	s.group = cmp.Or(kit.CopyGroup(spec), spec.Group+"#"+ports.NewID())
	s.settler = &kit.Settler{Broker: broker{s}, OnError: s.report, Now: a.clock.Now, DeliveryLimit: a.caps.DeliveryLimit}
	if native {
		s.settler.Requeue = s.requeue
	}
	if _, ok := ds.(driver.DeadLetterer); ok {
		s.settler.DeadLetter = s.deadLetter
	}
	s.settler.Tracker.Lookup = s.claim
	if r, ok := ds.(driver.Reporter); ok {
		r.SetReport(s.report)
	}
	// The delay fallback runs only where the broker lacks the delay: a
	// driver that delays messages and requeues natively costs no goroutine.
	// Without a native delayed requeue, requeue copies are held, then
	// published without delay, even where a message can be delayed on
	// publish (amqp: a delayed publish goes through the broker's
	// dead-lettering, which a restart can hold up for minutes).
	if !a.caps.DelayedMessage || !a.caps.DelayedRequeue {
		s.delayer = kit.NewDelayer(kit.DelayerOptions{Scheduler: a.sched})
		s.settler.Delayer = s.delayer
	}
	return s
}

// claim finds d's settlement claim, refusing another subscription's.
func (s *Subscription) claim(d *ports.Delivery) (*kit.Claim, error) {
	if x := s.mine(d); x != nil {
		return &x.claim, nil
	}
	return nil, ErrForeignDelivery
}

// mine returns d's handle when d is this subscription's delivery, else nil.
func (s *Subscription) mine(d *ports.Delivery) *handle {
	if d != nil {
		if x, ok := d.Handle.(*handle); ok && x.sub == s && &x.r.d == d {
			return x
		}
	}
	return nil
}

func (s *Subscription) report(err error) { s.errs.Report(s.a.scrub(err)) }

// signal wakes a Receive waiting for room or a due hold.
func (s *Subscription) signal() { kit.Signal(s.room) }

// Receive returns up to max deliveries, never more than the free slots of
// SubscriptionSpec.InFlight (it waits for a settlement when none is free).
// A retryable broker failure is reported on Errors and retried after a
// backoff; another one is returned, classified. It returns ctx.Err() when
// ctx is done and ports.ErrClosed after Stop.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	return s.ReceiveAppend(ctx, nil, max)
}

// ReceiveAppend is Receive appending to dst (see ports.ReceiveAppender).
func (s *Subscription) ReceiveAppend(ctx context.Context, dst []*ports.Delivery, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		return nil, &ports.ValueError{Field: "Receive max", Reason: "must be at least 1"}
	}
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	for attempt := 0; ; {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return dst, ports.ErrClosed
		}
		if len(s.ready) > 0 {
			n := min(max, len(s.ready))
			out := append(dst, s.ready[:n]...)
			clear(s.ready[:n])
			s.ready = s.ready[n:]
			s.mu.Unlock()
			return out, nil
		}
		room := s.spec.InFlight - int(s.out.Load())
		if room <= 0 {
			s.mu.Unlock()
			s.needRoom.Store(true)
			if s.spec.InFlight-int(s.out.Load()) <= 0 { // a Settle after the first look signals
				if err := s.wait(ctx); err != nil {
					s.needRoom.Store(false)
					return dst, err
				}
			}
			s.needRoom.Store(false)
			continue
		}
		rctx := s.receiveCtxLocked(ctx)
		s.mu.Unlock()

		recs, err := s.ds.ReceiveBatch(rctx, min(max, room))

		stopped := s.closing.Load()
		woken := rctx.Err() != nil
		switch {
		case err == nil:
			if attempt > 0 {
				s.a.log.Info("sluice: receiving again", "adapter", s.a.Name(), "topic", string(s.spec.Topic), "failed_attempts", attempt)
			}
			attempt = 0
			if out := s.deliveries(dst, recs); len(out) > len(dst) {
				return out, nil
			}
		case ctx.Err() != nil:
			return dst, ctx.Err()
		case stopped:
			return dst, ports.ErrClosed
		case woken:
			// a hold fell due: take it on the next turn
		default:
			err = s.a.classify("receive", err)
			var be *ports.BrokerError
			if !errors.As(err, &be) || !be.Retryable {
				return dst, err
			}
			wait := s.a.backoff.Delay(attempt)
			attempt++
			s.report(fmt.Errorf("receive from %q failed (attempt %d), retrying in %v: %w", string(s.spec.Topic), attempt, wait, err))
			if err := kit.Sleep(ctx, s.done, wait); err != nil { // Stop cuts it short
				return dst, err
			}
		}
	}
}

// receiveCtxLocked returns the context for a driver ReceiveBatch: derived
// from ctx and cancelled by a hold falling due or by Stop. It is reused
// while ctx stays the same and it is not cancelled, so that a receive
// costs no allocation for it.
func (s *Subscription) receiveCtxLocked(ctx context.Context) context.Context {
	if s.rctx == nil || s.rparent != ctx || s.rctx.Err() != nil {
		if s.cancelRecv != nil {
			s.cancelRecv()
		}
		s.rctx, s.cancelRecv = context.WithCancel(ctx)
		s.rparent = ctx
	}
	return s.rctx
}

// wait blocks until a slot is freed, a hold falls due, Stop or ctx.
func (s *Subscription) wait(ctx context.Context) error {
	select {
	case <-s.room:
		return nil
	case <-s.done:
		return ports.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// received is a delivery and its handle, allocated together.
type received struct {
	d ports.Delivery
	h handle
}

// single is one received delivery and the slice that returns it, in one
// allocation: a consumer that keeps up receives one record at a time.
type single struct {
	x   [1]received
	out [1]*ports.Delivery
}

// receivedChunk is how many deliveries (with their handles) are allocated
// at once: a ReceiveBatch of fewer records takes them from the rest of a
// chunk, so that a consumer that keeps up (one record per receive) does
// not allocate per delivery. As many as fit in 8 KiB, an allocation size
// class, so that the chunk wastes no rounding up.
const receivedChunk = 8192 / int(unsafe.Sizeof(received{}))

// take returns an unused delivery with its handle: one the core gave back
// (Recycle: acknowledged, reachable by no user code), or the next of the
// current chunk, handed out once (a delivery user code keeps past its
// settlement keeps its chunk in memory). Called under recvMu.
func (s *Subscription) take() *received {
	if len(s.reuse) == 0 {
		s.backMu.Lock()
		s.reuse, s.back = s.back, s.reuse
		s.backMu.Unlock()
	}
	if n := len(s.reuse); n > 0 {
		r := s.reuse[n-1]
		s.reuse = s.reuse[:n-1]
		return r
	}
	if len(s.chunk) == 0 {
		s.chunk = make([]received, receivedChunk)
	}
	r := &s.chunk[0]
	s.chunk = s.chunk[1:]
	return r
}

// Recycle takes back acknowledged deliveries of this subscription that
// nothing outside the core can reach (ports.Recycler), cleared, for the
// next receives: a pipeline that keeps no delivery then allocates none
// per message. It keeps at most twice the in-flight limit.
func (s *Subscription) Recycle(ds []*ports.Delivery) {
	s.backMu.Lock()
	defer s.backMu.Unlock()
	for _, d := range ds {
		x := s.mine(d)
		if x == nil || len(s.back) >= 2*s.spec.InFlight {
			continue
		}
		if st, a := x.claim.State(); st != kit.Done || a != ports.Ack || !x.freed.Load() {
			continue // not acknowledged: the broker's, the settler's or the caller's still
		}
		r := x.r
		*r = received{} // holds no message until it is handed out again
		s.back = append(s.back, r)
	}
}

// deliveries turns records into deliveries appended to out, counting each
// in the in-flight bound, and holds those whose not-before time is still
// ahead. The deliveries and their handles are those the core gave back
// (Recycle) or carved from a chunk shared by consecutive calls (take); for
// a lone record with no room in out, they and the slice are one
// allocation.
func (s *Subscription) deliveries(out []*ports.Delivery, recs []driver.Record) []*ports.Delivery {
	var now time.Time // read once, when a record needs it
	clock := func() time.Time {
		if now.IsZero() {
			now = s.a.clock.Now()
		}
		return now
	}
	var one *single
	var foreign []any
	switch {
	case cap(out)-len(out) >= len(recs):
	case len(recs) == 1 && len(out) == 0:
		one = new(single)
		out = one.out[:0]
	default:
		out = slices.Grow(out, len(recs))
	}
	for i := range recs {
		r := &recs[i]
		var rx *received
		if one != nil {
			rx = &one.x[0]
		} else {
			rx = s.take()
		}
		x, d := &rx.h, &rx.d
		x.h, x.sub, x.r = r.Handle, s, rx
		*d = ports.Delivery{Message: r.Message, RedeliveryCount: r.RedeliveryCount, Facts: r.Facts, ReceivedAt: r.ReceivedAt, Handle: x, Err: r.Err, Decoded: r.Decoded}
		d.Topic = s.spec.Topic
		if d.ReceivedAt.IsZero() {
			d.ReceivedAt = clock()
		}
		d.ID, d.IDSource = x.lazy.Identity(d.Headers, r.Lazy, r.BrokerID)
		if s.copies { // the requeue copies' count: a malformed one is poison
			if kit.ForeignCopy(&d.Headers, s.group) {
				foreign = append(foreign, r.Handle) // another group's copy
				continue
			}
			n, err := ports.RedeliveryCountFrom(d.Headers)
			d.RedeliveryCount += n
			if err != nil && d.Err == nil {
				d.Err = err
			}
			d.Headers.Del(ports.HeaderRedeliveryCount) // transport: the count is RedeliveryCount
		}
		at, err := kit.TakeNotBefore(&d.Headers)
		if err != nil && d.Err == nil {
			d.Err = err
		}
		if !at.IsZero() && s.delayer != nil {
			if wait := at.Sub(clock()); wait > 0 && s.delayer.After(wait, func(context.Context) { s.due(d) }) == nil {
				continue
			}
		}
		out = append(out, d)
	}
	s.out.Add(int64(len(recs) - len(foreign)))
	if len(foreign) > 0 {
		if err := s.ds.SendAcks(context.Background(), foreign); err != nil {
			s.report(fmt.Errorf("acknowledging %d requeue copies of other groups (they come back, and are passed over again): %w", len(foreign), s.a.classify("ack", err)))
		}
	}
	return out
}

// due hands a held delivery to the next Receive.
func (s *Subscription) due(d *ports.Delivery) {
	s.mu.Lock()
	s.ready = append(s.ready, d)
	if s.cancelRecv != nil {
		s.cancelRecv()
	}
	s.mu.Unlock()
	s.signal()
}

// Settle applies disp to every delivery of ds as one outcome (see
// ports.Subscription.Settle and kit.Settler). An Ack is one driver
// SendAcks call for the whole of ds.
func (s *Subscription) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.isStopped() {
		return ports.ErrClosed
	}
	settle := s.settler.Settle
	if s.a.caps.BestEffort && s.spec.QoS == ports.BestEffort && disp.Action != ports.Ack {
		if dr, ok := s.ds.(driver.Dropper); ok {
			settle = func(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
				return s.drop(ctx, ds, disp, dr)
			}
		} else {
			disp = kit.BestEffortDisposition(s.spec, disp)
		}
	}
	if disp.Action != ports.Ack {
		s.discard(ds) // transact.go: nothing staged for them is committed
		for _, d := range ds {
			s.LoadHeaders(d) // their copies carry them
		}
	}
	err := settle(ctx, ds, disp)
	// A settlement attempt gives the slots back whatever its result: a
	// delivery whose settlement failed is left to the broker's redelivery
	// (or to a retry, which frees nothing twice), and must not shrink the
	// window for good.
	s.free(ds)
	if err != nil {
		if errors.Is(err, ports.ErrAlreadyCompleted) || errors.Is(err, ports.ErrConflict) {
			err = fmt.Errorf("%w: %w", ErrAlreadySettled, err)
		} else {
			s.handBack(ds, err)
		}
		return s.a.scrub(err)
	}
	return nil
}

// free gives back the in-flight slots of this subscription's deliveries of
// ds that still hold one.
func (s *Subscription) free(ds []*ports.Delivery) {
	n := 0
	for _, d := range ds {
		if x := s.mine(d); x != nil && x.freed.CompareAndSwap(false, true) {
			n++
		}
	}
	if n == 0 {
		return
	}
	s.out.Add(-int64(n))
	if s.needRoom.Load() {
		s.signal()
	}
}

// drop carries out a Requeue or DeadLetter of a best-effort subscription
// as the driver's native drop.
func (s *Subscription) drop(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition, dr driver.Dropper) error {
	if err := kit.ValidDisposition(disp); err != nil || len(ds) == 0 {
		return err
	}
	if err := s.settler.Tracker.Begin(ds, disp.Action); err != nil {
		return err
	}
	err := s.a.classify("drop", dr.SendDrops(ctx, handleSlice(ds)))
	s.settler.Tracker.End(ds, err == nil)
	return err
}

func (s *Subscription) isStopped() bool { return s.closing.Load() }

// Stop stops receiving, cancels the held requeues and deliveries (their
// originals are unacknowledged on the broker) and closes the driver's
// subscription, which hands every unsettled record back for redelivery.
// It acks nothing and is idempotent.
func (s *Subscription) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.closing.Store(true)
	close(s.done)
	if s.cancelRecv != nil {
		s.cancelRecv()
	}
	s.ready = nil
	s.mu.Unlock()
	s.recvMu.Lock() // the running Receive has returned
	s.recvMu.Unlock()
	s.gate.Lock() // no Settle is running
	s.gate.Unlock()
	if s.delayer != nil {
		s.delayer.Stop()
	}
	err := s.ds.Close(ctx)
	s.errs.Close()
	s.a.forget(s)
	return s.a.classify("stop", err)
}

// Errors reports asynchronous failures; it is closed by Stop.
func (s *Subscription) Errors() <-chan error { return s.errs.C() }

// DeferHeaders leaves the headers in the driver's records from now on,
// if it can (ports.HeaderDeferrer).
func (s *Subscription) DeferHeaders() { kit.DeferHeaders(s.ds) }

// LoadHeaders fills in d's headers if they were left in its record.
func (s *Subscription) LoadHeaders(d *ports.Delivery) {
	if x := s.mine(d); x != nil {
		x.lazy.Load(d)
	}
}

// LookupHeader reads d's header name, from its record while they are left
// there (ports.HeaderLookup).
func (s *Subscription) LookupHeader(d *ports.Delivery, name string) (string, bool) {
	if x := s.mine(d); x != nil {
		return x.lazy.Lookup(d, name)
	}
	return d.Headers.Lookup(name)
}

// Predecode passes decode to a driver that fetches on goroutines of its
// own (driver.Predecoder); without one the pipeline decodes.
func (s *Subscription) Predecode(decode func(payload []byte) any) {
	if p, ok := s.ds.(driver.Predecoder); ok {
		p.Predecode(decode)
	}
}

// flushing is a Subscription whose driver defers acknowledgements: flow
// calls its Settle(Ack) one call at a time (on the settlement engine's
// goroutine or the receive loop's) and Flush before Stop; CarriesAcks
// reports whether the driver's reads carry them (ports.AckCarrier).
type flushing struct{ *Subscription }

var _, _ = ports.Flusher(flushing{}), ports.AckCarrier(flushing{})

func (f flushing) Flush(ctx context.Context) error {
	return f.a.classify("flush", f.ds.(driver.AckFlusher).FlushAcks(ctx))
}

func (f flushing) CarriesAcks() bool { c, ok := f.ds.(driver.AckCarrier); return ok && c.CarriesAcks() }
