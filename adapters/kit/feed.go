package kit

import (
	"context"
	"slices"
	"time"
)

// Feed carries the records of several partitions, each read on a
// goroutine of its own (a client's partition claim: sarama's
// ConsumeClaim), to the one goroutine that receives them (the driver's
// ReceiveBatch), in batches: the work per record (decoding, filtering)
// runs in parallel on the partitions' goroutines, and the receiver takes
// a batch per channel operation. The receiver gets the records oldest
// first across partitions and never out of a partition's order: they are
// ordered by their partition's latest timestamp so far, which a
// producer's clock cannot move back. [Pump] is a partition's side (any
// number at once); [Feed.Take] and [Feed.Wait] are the receiver's (one
// goroutine). Create it with [NewFeed].
type Feed[T any] struct {
	batches, free chan []fed[T]
	held          [][]fed[T] // received by Wait
	sorted        []*fed[T]  // Take's, reused
}

type fed[T any] struct {
	at time.Time
	v  T
}

// FeedBatch bounds the records [Pump] hands over at once.
const FeedBatch = 64

// NewFeed returns a Feed that holds up to depth batches the receiver has
// not taken; a [Pump] waits when it is full.
func NewFeed[T any](depth int) *Feed[T] {
	return &Feed[T]{batches: make(chan []fed[T], depth), free: make(chan []fed[T], 2*depth)}
}

// Pump hands what in delivers to f until in is closed or done or stop
// is: what arrives first at once, with what in holds by then, up to
// [FeedBatch]. convert makes the record of m on Pump's goroutine and
// returns m's timestamp; now is when m's batch began.
func Pump[M, T any](f *Feed[T], in <-chan M, done, stop <-chan struct{}, convert func(m M, now time.Time) (T, time.Time)) {
	var latest time.Time
	for {
		var m M
		ok := false
		select {
		case m, ok = <-in:
		case <-done:
		case <-stop:
		}
		if !ok {
			return
		}
		var b []fed[T]
		select {
		case b = <-f.free:
		default:
			b = make([]fed[T], 0, FeedBatch)
		}
		for now := time.Now(); ok; {
			v, at := convert(m, now)
			if at.After(latest) {
				latest = at
			}
			b, ok = append(b, fed[T]{latest, v}), false
			if len(b) < FeedBatch {
				select {
				case m, ok = <-in:
				default:
				}
			}
		}
		select {
		case f.batches <- b:
		case <-done:
			return
		case <-stop:
			return
		}
	}
}

// Take takes batches without waiting until, with those Wait received,
// they hold room records or more (or none are left), and hands their
// records to add, oldest first.
func (f *Feed[T]) Take(room int, add func(T)) {
	n := 0
	for _, b := range f.held {
		n += len(b)
	}
drain:
	for n < room {
		select {
		case b := <-f.batches:
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
	slices.SortStableFunc(sorted, func(a, b *fed[T]) int { return a.at.Compare(b.at) })
	for _, r := range sorted {
		add(r.v)
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
		f.held = append(f.held, b)
	case <-wake:
	case err := <-failed:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
