package operators

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// ErrDuplicateBusy fails a duplicate whose original is being handled by
// another holder of a shared DedupeStore. It is retryable: the duplicate
// is requeued, and by the time it comes back the original is committed
// (the duplicate is then acked) or released (it is handled).
var ErrDuplicateBusy = errors.New("duplicate of a message being handled elsewhere")

// DedupeOptions configure Dedupe.
type DedupeOptions[T any] struct {
	// Store remembers handled keys. Default: a MemoryStore with its
	// defaults (100000 keys, 1h), private to this stage.
	Store DedupeStore
	// Key returns an item's idempotency key. Default: the message id
	// (ports.Delivery.ID, stable across redeliveries). Items whose key is
	// "" — with the default, messages without identity (a foreign
	// producer's message on a broker that assigns none, see
	// ports.IDSource) — pass on unchanged, never dropped: nothing can
	// tell two of them apart. The first such item is logged once (Logger).
	Key func(flow.Item[T]) string
	// OnError receives a store error that cannot change the outcome: a
	// Commit or Release that failed after the item completed (the key is
	// then not remembered and a later duplicate is handled again).
	// Default: logged at Warn level with Logger.
	OnError func(error)
	// Logger receives the one warning logged when the first item without
	// a key passes, and the default OnError's. Default slog.Default().
	Logger *slog.Logger
}

// Dedupe drops duplicates: an item whose key was handled before (its
// handling succeeded and was committed to the store) is acked without
// being passed on. The first item with a key is passed on; when it
// succeeds its key is committed (before its delivery is acked), and when it
// fails or is cancelled its key is released, so a redelivery is handled
// again.
//
// Settlement: every item is completed exactly once. A duplicate of a
// handled message succeeds at once (ACK). A duplicate that arrives while
// the same key is in progress in this stage is held and completed with
// the first one's outcome. A duplicate whose key is held by another
// process (ClaimBusy) fails with ErrDuplicateBusy (requeued). A store
// error on Claim fails the item (requeued). Order is kept for the items
// passed on.
//
// Delivery stays at least once: a crash after the side effect and before
// Commit handles the redelivery again.
func Dedupe[T any](in flow.Stream[T], o DedupeOptions[T]) flow.Stream[T] {
	if o.Store == nil {
		o.Store = NewMemoryStore(MemoryStoreOptions{})
	}
	if o.Key == nil {
		o.Key = func(it flow.Item[T]) string {
			if it.Msg != nil {
				return it.Msg.ID
			}
			return ""
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnError == nil {
		o.OnError = func(err error) { o.Logger.Warn("sluice operators: dedupe store", "err", err) }
	}
	d := &deduper[T]{o: o, inflight: map[string][]*flow.Completion{}}
	return flow.Via(in, d.handle)
}

type deduper[T any] struct {
	o        DedupeOptions[T]
	mu       sync.Mutex
	inflight map[string][]*flow.Completion // key -> held duplicates
	noKey    sync.Once
}

func (d *deduper[T]) handle(it flow.Item[T], emit flow.Emit[T]) {
	key := d.o.Key(it)
	if key == "" {
		d.noKey.Do(func() { d.warnNoKey(it) })
		emit(it)
		return
	}
	d.mu.Lock()
	if held, ok := d.inflight[key]; ok {
		d.inflight[key] = append(held, it.Completion)
		d.mu.Unlock()
		return
	}
	d.inflight[key] = nil
	d.mu.Unlock()

	claim, err := d.claim(it.Ctx, key)
	switch {
	case err != nil:
		d.finish(key, it.Completion, flow.Outcome{Kind: flow.Failed, Err: fmt.Errorf("dedupe claim %q: %w", key, err)})
	case claim == ClaimDone:
		d.finish(key, it.Completion, flow.Outcome{Kind: flow.Succeeded})
	case claim == ClaimBusy:
		d.finish(key, it.Completion, flow.Outcome{Kind: flow.Failed, Err: ErrDuplicateBusy})
	default:
		parent, ctx := it.Completion, context.WithoutCancel(it.Ctx)
		it.Completion = parent.Derive(func(o flow.Outcome) {
			err := safeStore(func() error {
				if o.Kind == flow.Succeeded {
					return d.o.Store.Commit(ctx, key)
				}
				return d.o.Store.Release(ctx, key)
			})
			if err != nil {
				d.o.OnError(fmt.Errorf("dedupe key %q after %v: %w", key, o.Kind, err))
			}
			d.finish(key, parent, o)
		})
		emit(it)
	}
}

// warnNoKey logs, once per stage, that items without a key pass through.
func (d *deduper[T]) warnNoKey(it flow.Item[T]) {
	attrs := []any{}
	if m := it.Msg; m != nil {
		attrs = append(attrs, "topic", string(m.Topic), "id_source", m.IDSource.String())
	}
	d.o.Logger.Warn("sluice operators: dedupe passes items without a key through, not deduplicated "+
		"(a message without identity: its producer set no id and its broker assigns none); logged once", attrs...)
}

// finish completes c and every duplicate held behind key with o.
func (d *deduper[T]) finish(key string, c *flow.Completion, o flow.Outcome) {
	d.mu.Lock()
	held := d.inflight[key]
	delete(d.inflight, key)
	d.mu.Unlock()
	_ = c.Complete(o)
	for _, h := range held {
		_ = h.Complete(o)
	}
}

// claim asks the store, turning a panic into an error so the key is
// never left registered without an owner.
func (d *deduper[T]) claim(ctx context.Context, key string) (c Claim, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ports.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return d.o.Store.Claim(ctx, key)
}

// safeStore calls a store method after the outcome is known, turning a
// panic into an error: the outcome must still reach the delivery.
func safeStore(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ports.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}
