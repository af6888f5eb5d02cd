package operators

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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
}

// Batched is the value of a batch item: the members' values in arrival
// order, and the delivery each came from (Msgs[i] belongs to Values[i];
// nil for a member that had none).
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
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[T], out chan<- flow.Item[Batched[T]]) error {
		b := batcher[T]{o: o, ctx: ctx, out: out}
		return b.run(src)
	})
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

type batcher[T any] struct {
	o     BatchOptions
	ctx   context.Context
	out   chan<- flow.Item[Batched[T]]
	held  []flow.Item[T]
	bytes int
}

func (b *batcher[T]) run(src <-chan flow.Item[T]) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var window <-chan time.Time
	for {
		select {
		case it, ok := <-src:
			if !ok {
				b.flush()
				return nil
			}
			if cancelled(it) {
				continue
			}
			n := b.size(it)
			if b.o.MaxBytes > 0 && len(b.held) > 0 && b.bytes+n > b.o.MaxBytes {
				b.flush()
				timer.Stop()
				window = nil
			}
			b.held = append(b.held, it)
			b.bytes += n
			if len(b.held) == 1 {
				timer.Reset(b.o.Window)
				window = timer.C
			}
			if len(b.held) >= b.o.Size || (b.o.MaxBytes > 0 && b.bytes >= b.o.MaxBytes) {
				b.flush()
				timer.Stop()
				window = nil
			}
		case <-window:
			window = nil
			b.flush()
		case <-b.ctx.Done():
			timer.Stop()
			for _, it := range b.held {
				_ = it.Completion.Cancel(b.ctx.Err())
			}
			b.held = nil
			cancelRest(src, b.ctx.Err())
			return nil
		}
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

func (b *batcher[T]) flush() {
	if len(b.held) == 0 {
		return
	}
	members := b.held
	v := Batched[T]{Values: make([]T, len(members)), Msgs: make([]*ports.Delivery, len(members))}
	cs := make([]*flow.Completion, len(members))
	for i, it := range members {
		v.Values[i], v.Msgs[i], cs[i] = it.Value, it.Msg, it.Completion
	}
	// The batch item keeps copies, not members: the next batch reuses the
	// slice (cleared, so that it does not keep settled items alive)
	// instead of growing a new one by appends, about 200 bytes of garbage
	// per member at a size of 50.
	clear(members)
	b.held, b.bytes = members[:0], 0
	var c *flow.Completion
	if b.o.IsolatePoison {
		c = cs[0].Derive(func(o flow.Outcome) { completeIsolated(cs, o) })
	} else {
		c = flow.Join(cs...)
	}
	b.out <- flow.Item[Batched[T]]{Ctx: b.ctx, Value: v, Completion: c}
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
