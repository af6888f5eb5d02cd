package operators

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// BatchOptions configure Batch. Zero fields take their defaults from the
// pipeline's SubscriptionSpec.Batch, then from the constants below.
type BatchOptions struct {
	// Size is the largest batch. Default: SubscriptionSpec.Batch.Size, or
	// else 100 capped at SubscriptionSpec.InFlight (a batch can never
	// hold more than the in-flight limit). A Size above the in-flight
	// limit raises the limit to Size when SubscriptionSpec.InFlight was
	// left zero (Start logs the raise) and makes Start fail with
	// ports.ErrInvalid when it was set (see flow.Pipeline.NeedInFlight).
	Size int
	// Window bounds how long a partial batch waits for more items, from
	// its first item. Default: SubscriptionSpec.Batch.Window, or else
	// ports.DefaultBatchWindow (100ms).
	Window time.Duration
	// MaxBytes, when positive, closes a batch before its items' sizes add
	// up past it; a single larger item forms a batch of its own. An item's
	// size is its delivery's payload length (0 without one). Default:
	// SubscriptionSpec.Batch.MaxBytes (0: no byte bound).
	MaxBytes int
	// IsolatePoison lets the handler name the bad members of a batch with
	// a *BatchError: those are dead-lettered with their own reason and the
	// rest of the batch is acked. Without it (the default) a batch has one
	// outcome for all its members, a *BatchError included.
	IsolatePoison bool
	// ValuesOnly hands the handler the members' values only: Batched.Msgs
	// is nil. The pipeline then keeps its fast path (flow.ValuesOnly):
	// it recycles deliveries once settled and may leave their headers in
	// the broker's records, which a stage that hands out deliveries turns
	// off. On Kafka that is most of what a batch pipeline costs over the
	// default one (docs/benchmarks.md). Leave it false when the handler
	// reads the members' ids, headers or facts.
	ValuesOnly bool
}

// Batched is the value of a batch item: the members' values in arrival
// order, and the delivery each came from (Msgs[i] belongs to Values[i];
// nil for a member that had none; Msgs is nil with
// BatchOptions.ValuesOnly). A delivery in Msgs is the handler's until the
// batch item is completed, not after.
type Batched[T any] struct {
	Values []T
	Msgs   []*ports.Delivery
}

// Len returns the number of members.
func (b Batched[T]) Len() int { return len(b.Values) }

// Batch groups items into batches of up to Size, closing each partial
// batch Window after its first item or before it passes MaxBytes.
//
// Settlement: a batch has one outcome that completes every member the same
// way (flow.Join): success acks all, a retryable error requeues all,
// poison dead-letters all, cancellation settles none. With IsolatePoison,
// a *BatchError outcome dead-letters the members it names (each with its
// own reason) and acks the others. A *flow.MemberOutcomes outcome (with
// or without IsolatePoison) acks, requeues and dead-letters each member
// as it says, with as few Settle calls as the dispositions allow. Members
// are completed only when the batch item is.
//
// Order: members keep arrival order; batches are emitted in order. When
// the input closes (the pipeline is stopping) the partial batch is flushed
// at once and handled within the drain; when the pipeline cancels, the
// members of the batch being built are cancelled. A batch item's context is
// the pipeline's and carries no single delivery (Item.Msg is nil).
//
// Goroutines: members are added on the goroutine of the stage before
// Batch (flow.Gather: the source's, after one-worker stages), with no
// hand-off per item; each batch crosses over a channel to the stage
// after Batch, which runs on goroutines of its own, so the source goes
// on receiving while a batch is handled.
//
// A negative option makes the pipeline's Start fail with ports.ErrInvalid.
func Batch[T any](in flow.Stream[T], opts BatchOptions) flow.Stream[Batched[T]] {
	if opts.Size < 0 || opts.Window < 0 || opts.MaxBytes < 0 {
		return flow.Invalid[T, Batched[T]](in, invalid("Batch", "BatchOptions", "size, window and bytes must not be negative"))
	}
	p := in.Pipeline()
	o := batchDefaults(opts, p.Spec())
	// A batch holds only deliveries in flight: a smaller limit would cut
	// every batch short and make it wait out its window.
	p.NeedInFlight(o.Size, "operators.Batch")
	var gopts []flow.StageOption
	if o.ValuesOnly {
		// The batcher keeps that promise: values out, members' completions
		// joined (or derived) and never touched again.
		gopts = append(gopts, flow.ValuesOnly())
	}
	return flow.Gather(in, func(ctx context.Context, emit flow.Emit[Batched[T]]) flow.Gatherer[T] {
		return newBatcher(ctx, o, emit)
	}, gopts...)
}

func batchDefaults(o BatchOptions, sp ports.SubscriptionSpec) BatchOptions {
	if o.Size == 0 {
		o.Size = sp.Batch.Size
		if o.Size == 0 {
			o.Size = min(100, sp.InFlight)
		}
	}
	if o.Window == 0 {
		o.Window = sp.Batch.Window
		if o.Window == 0 {
			o.Window = ports.DefaultBatchWindow
		}
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = sp.Batch.MaxBytes
	}
	return o
}

// batcher builds the batches of a Batch stage. Push runs on the goroutine
// of the stage before it (flow.Gather); the window timer's flush and the
// cancellation run on goroutines of their own, so every step takes mu:
// a batch is emitted by one of them at a time, in order, and never while
// a member is being added.
type batcher[T any] struct {
	o    BatchOptions
	ctx  context.Context
	emit flow.Emit[Batched[T]]

	mu sync.Mutex
	// The batch being built: its members' values, deliveries and
	// completions, handed on as they are (no copy) when it closes.
	values []T
	msgs   []*ports.Delivery
	cs     []*flow.Completion
	bytes  int
	hint   int       // capacity of the next batch's slices: the last one's length
	due    time.Time // when the batch being built closes by its window
	timer  *time.Timer
	armed  bool // timer will fire (and take mu)
	over   bool // cancelled or closed: hold nothing more

	unhook    func() bool   // stops the cancellation callback
	cancelled chan struct{} // closed when the cancellation callback returned
}

func newBatcher[T any](ctx context.Context, o BatchOptions, emit flow.Emit[Batched[T]]) *batcher[T] {
	b := &batcher[T]{o: o, ctx: ctx, emit: emit, hint: min(o.Size, 64), cancelled: make(chan struct{})}
	b.timer = time.AfterFunc(time.Hour, b.fire)
	b.timer.Stop()
	b.unhook = context.AfterFunc(ctx, b.cancel)
	return b
}

// Push adds it to the batch being built, closing that batch first when
// it would pass MaxBytes, and after when it is full.
func (b *batcher[T]) Push(it flow.Item[T]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		_ = it.Completion.Cancel(b.ctx.Err())
		return
	}
	n := b.size(it)
	if b.o.MaxBytes > 0 && len(b.cs) > 0 && b.bytes+n > b.o.MaxBytes {
		b.flush()
	}
	if len(b.cs) == 0 {
		b.open()
	}
	b.values = append(b.values, it.Value)
	if !b.o.ValuesOnly {
		b.msgs = append(b.msgs, it.Msg)
	}
	b.cs = append(b.cs, it.Completion)
	b.bytes += n
	if len(b.cs) >= b.o.Size || (b.o.MaxBytes > 0 && b.bytes >= b.o.MaxBytes) {
		b.flush()
	}
}

// open starts a batch: its slices, and its window. The timer is re-armed
// only when it is not armed already: a pending fire for an earlier batch
// (which can only be earlier than this one's window) finds this batch not
// due yet and re-arms for the rest, so that batches that fill before
// their window cost no timer operation each.
func (b *batcher[T]) open() {
	b.values = make([]T, 0, b.hint)
	if !b.o.ValuesOnly {
		b.msgs = make([]*ports.Delivery, 0, b.hint)
	}
	b.cs = make([]*flow.Completion, 0, b.hint)
	b.due = time.Now().Add(b.o.Window)
	if !b.armed {
		b.armed = true
		b.timer.Reset(b.o.Window)
	}
}

// fire is the window timer: it closes the batch being built when its
// window has passed, else waits for the rest of it.
func (b *batcher[T]) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	if b.over || len(b.cs) == 0 {
		return
	}
	if wait := time.Until(b.due); wait > 0 {
		b.armed = true
		b.timer.Reset(wait)
		return
	}
	b.flush()
}

// cancel runs when the pipeline cancels its work: the members of the
// batch being built are cancelled (not settled), and so is every item
// pushed afterwards.
func (b *batcher[T]) cancel() {
	defer close(b.cancelled)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.over = true
	b.timer.Stop()
	for _, c := range b.cs {
		_ = c.Cancel(b.ctx.Err())
	}
	b.values, b.msgs, b.cs, b.bytes = nil, nil, nil, 0
}

// Close flushes the partial batch when the input closes (the pipeline is
// stopping: it is handled within the drain), and waits for a cancellation
// already under way, so that nothing of the batcher outlives the stage.
func (b *batcher[T]) Close() {
	b.mu.Lock()
	if !b.over {
		b.flush()
		b.over = true
		b.timer.Stop()
	}
	b.mu.Unlock()
	if !b.unhook() {
		<-b.cancelled
	}
}

func (b *batcher[T]) size(it flow.Item[T]) int {
	if b.o.MaxBytes <= 0 {
		return 0
	}
	if it.Msg != nil {
		return len(it.Msg.Payload)
	}
	return 0
}

// flush emits the batch being built, if any (b.mu held).
func (b *batcher[T]) flush() {
	if len(b.cs) == 0 {
		return
	}
	v := Batched[T]{Values: b.values, Msgs: b.msgs}
	cs := b.cs
	b.hint = len(cs)
	b.values, b.msgs, b.cs, b.bytes = nil, nil, nil, 0
	var c *flow.Completion
	if b.o.IsolatePoison {
		c = cs[0].Derive(func(o flow.Outcome) { completeIsolated(cs, o) })
	} else {
		c = flow.Join(cs...)
	}
	b.emit(flow.Item[Batched[T]]{Ctx: b.ctx, Value: v, Completion: c})
}

// completeIsolated completes the members of an IsolatePoison batch: the
// members a *BatchError names are poisoned with their reason, the others
// succeed; any other outcome completes every member alike.
func completeIsolated(cs []*flow.Completion, o flow.Outcome) {
	if flow.IsMemberOutcomes(o) {
		_ = flow.Join(cs...).Complete(o)
		return
	}
	var be *BatchError
	if o.Kind == flow.Failed || o.Kind == flow.Poisoned {
		if errors.As(o.Err, &be) && be.names(len(cs)) {
			for i, c := range cs {
				if err, bad := be.Failed[i]; bad {
					if err == nil {
						err = errors.New("named bad by the batch handler")
					}
					_ = c.Fail(ports.Poison(err))
				} else {
					_ = c.Succeed()
				}
			}
			return
		}
	}
	for _, c := range cs {
		_ = c.Complete(o)
	}
}

// BatchError names the bad members of a batch by their index in
// Batched.Values. With BatchOptions.IsolatePoison, the named members are
// dead-lettered with their error (made poison) as the reason and the
// others are acked; a BatchError naming no member of the batch fails the
// whole batch. Without IsolatePoison it is an ordinary error that requeues
// the whole batch.
type BatchError struct {
	// Failed maps a member index to why it is bad.
	Failed map[int]error
}

// Add names member i as bad because of err.
func (e *BatchError) Add(i int, err error) {
	if e.Failed == nil {
		e.Failed = make(map[int]error)
	}
	e.Failed[i] = err
}

// Err returns e, or nil when it names no member: return it from a batch
// handler.
func (e *BatchError) Err() error {
	if e == nil || len(e.Failed) == 0 {
		return nil
	}
	return e
}

func (e *BatchError) names(n int) bool {
	for i := range e.Failed {
		if i >= 0 && i < n {
			return true
		}
	}
	return false
}

func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	fmt.Fprintf(&b, "%d bad batch member(s):", len(idx))
	for _, i := range idx {
		fmt.Fprintf(&b, " [%d] %v;", i, e.Failed[i])
	}
	return strings.TrimSuffix(b.String(), ";")
}
