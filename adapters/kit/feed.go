package kit

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// Feed carries records decoded on goroutines beside the receiver's (the
// Kafka consumer's decode workers, one [Lanes]) to the one goroutine that
// receives them (the driver's ReceiveBatch), in batches: the work per
// record (decoding, filtering) runs in parallel with the receiver's, and
// the receiver takes a batch per channel operation. The receiver gets the
// records oldest first across partitions and never out of a partition's
// order: they are ordered by the time the sender gives each (to the
// millisecond, then in the order sent), its partition's latest timestamp
// so far, which a producer's clock cannot move back. [Feed.Room] and
// [Feed.Reserve] are the sender's side (one goroutine), [Feed.Send] too
// or, with what it reserved, goroutines it hands records to (one per
// partition, say); [Feed.Take] and [Feed.Wait] are the receiver's (one
// goroutine). Create it with [NewFeed].
type Feed[T any] struct {
	limit         int
	queued        atomic.Int64 // reserved, not received
	room          chan struct{}
	batches, free chan []fed[T]
	held          [][]fed[T] // received by Wait
	sorted        []*fed[T]  // Take's, reused
}

type fed[T any] struct {
	at int64 // UnixMilli: exact for any Kafka timestamp, none overflows
	v  T
}

// FeedBatch bounds the records one batch of [Feed.Send] holds.
const FeedBatch = 64

// NewFeed returns a Feed that holds up to limit records the receiver has
// not taken.
func NewFeed[T any](limit int) *Feed[T] {
	limit = max(limit, 1)
	return &Feed[T]{limit: limit, room: make(chan struct{}, 1),
		batches: make(chan []fed[T], limit), free: make(chan []fed[T], min(limit, 64))}
}

// Room returns how many records the Feed can take now, waiting while it
// is full; 0 once ctx is done.
func (f *Feed[T]) Room(ctx context.Context) int {
	for {
		if n := f.limit - int(f.queued.Load()); n > 0 {
			return n
		}
		select {
		case <-f.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// Reserve holds room for n records, as many as Room returned or fewer,
// for the Send calls that follow (of n records in all).
func (f *Feed[T]) Reserve(n int) { f.queued.Add(int64(n)) }

// Send hands n reserved records to the receiver, made by convert(i) on the
// caller's goroutine, each with the time that orders it. It never waits.
func (f *Feed[T]) Send(n int, convert func(i int) (v T, at time.Time)) {
	for i := 0; i < n; {
		var b []fed[T]
		select {
		case b = <-f.free:
		default:
			b = make([]fed[T], 0, FeedBatch)
		}
		for ; i < n && len(b) < FeedBatch; i++ {
			v, at := convert(i)
			b = append(b, fed[T]{at.UnixMilli(), v})
		}
		f.batches <- b // room for it: a batch holds a reserved record or more, the channel limit batches
	}
}

// received accounts for b leaving the channel and wakes a waiting Room.
func (f *Feed[T]) received(b []fed[T]) {
	f.queued.Add(-int64(len(b)))
	Signal(f.room)
}

// Take takes batches without waiting until, with those Wait received,
// they hold room records or more (or none are left), and hands their
// records to add, oldest first (each one in place: add must not keep the
// pointer).
func (f *Feed[T]) Take(room int, add func(*T)) {
	n := 0
	for _, b := range f.held {
		n += len(b)
	}
drain:
	for n < room {
		select {
		case b := <-f.batches:
			f.received(b)
			f.held, n = append(f.held, b), n+len(b)
		default:
			break drain
		}
	}
	sorted := f.sorted[:0]
	for _, b := range f.held {
		for i := range b {
			sorted = append(sorted, &b[i])
		}
	}
	if byTime := func(a, b *fed[T]) int { return cmp.Compare(a.at, b.at) }; !slices.IsSortedFunc(sorted, byTime) {
		slices.SortStableFunc(sorted, byTime) // batches of several partitions
	}
	for _, r := range sorted {
		add(&r.v)
	}
	clear(sorted)
	f.sorted = sorted
	for _, b := range f.held {
		clear(b)
		select {
		case f.free <- b[:0]:
		default:
		}
	}
	clear(f.held)
	f.held = f.held[:0]
}

// Wait blocks until a batch arrives (when receive is true; the next Take
// hands it over), wake is signalled, failed delivers an error (returned)
// or ctx is done (ctx.Err()).
func (f *Feed[T]) Wait(ctx context.Context, receive bool, wake <-chan struct{}, failed <-chan error) error {
	var in chan []fed[T]
	if receive {
		in = f.batches
	}
	select {
	case b := <-in:
		f.received(b)
		f.held = append(f.held, b)
	case <-wake:
	case err := <-failed:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
