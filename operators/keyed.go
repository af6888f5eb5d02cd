package operators

import (
	"context"
	"runtime/debug"
	"sync"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// KeyOrderedOptions configure KeyOrdered.
type KeyOrderedOptions[In any] struct {
	// Limit is the number of calls of fn in progress at once, each for a
	// different key. Default 4.
	Limit int
	// Key returns an item's ordering key. Default: the delivery's
	// partition key (ports.Message.Key); items without a delivery share
	// the key "".
	Key func(flow.Item[In]) string
	// MaxQueued bounds the items read ahead and waiting for their key's
	// turn; the stage stops reading while it is reached. Default 1024.
	MaxQueued int
}

// KeyOrdered maps each value with fn, in parallel across keys and one at a
// time, in input order, within a key: the next item of a key is handled
// only after the previous one's result was emitted (or it was completed).
// Items of different keys do not wait for each other beyond Limit.
//
// Settlement: as flow.Map — fn's error completes the item and nothing is
// emitted; a result travels on with the item's completion; a panic fails
// the item. Cancelled items are cancelled in their turn.
//
// If Limit or MaxQueued is negative, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func KeyOrdered[In, Out any](in flow.Stream[In], fn func(context.Context, In) (Out, error), o KeyOrderedOptions[In]) flow.Stream[Out] {
	if o.Limit < 0 || o.MaxQueued < 0 {
		return flow.Invalid[In, Out](in, invalid("KeyOrdered", "KeyOrderedOptions", "Limit and MaxQueued must not be negative"))
	}
	if o.Limit == 0 {
		o.Limit = 4
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = 1024
	}
	if o.Key == nil {
		o.Key = func(it flow.Item[In]) string {
			if it.Msg != nil {
				return it.Msg.Key
			}
			return ""
		}
	}
	return flow.Operate(in, func(_ context.Context, src <-chan flow.Item[In], out chan<- flow.Item[Out]) error {
		k := keyed[In, Out]{o: o, fn: fn, out: out, queues: map[string]*keyQueue[In]{}}
		k.run(src)
		return nil
	})
}

type keyQueue[In any] struct {
	items  []flow.Item[In]
	active bool
}

type keyJob[In any] struct {
	key string
	it  flow.Item[In]
}

type keyed[In, Out any] struct {
	o      KeyOrderedOptions[In]
	fn     func(context.Context, In) (Out, error)
	out    chan<- flow.Item[Out]
	queues map[string]*keyQueue[In]
	ready  []string // keys with queued items and none in progress, in turn order
	queued int
	busy   int
}

func (k *keyed[In, Out]) run(src <-chan flow.Item[In]) {
	jobs := make(chan keyJob[In], k.o.Limit)
	done := make(chan string, k.o.Limit)
	var wg sync.WaitGroup
	wg.Add(k.o.Limit)
	for range k.o.Limit {
		go func() {
			defer wg.Done()
			for j := range jobs {
				if r, ok := apply(j.it, k.fn); ok {
					k.out <- r
				}
				done <- j.key
			}
		}()
	}
	defer func() { close(jobs); wg.Wait() }()
	for {
		for k.busy < k.o.Limit && len(k.ready) > 0 {
			key := k.ready[0]
			k.ready = k.ready[1:]
			q := k.queues[key]
			it := q.items[0]
			q.items[0] = flow.Item[In]{}
			q.items = q.items[1:]
			q.active = true
			k.busy++
			k.queued--
			jobs <- keyJob[In]{key: key, it: it}
		}
		if src == nil && k.busy == 0 && k.queued == 0 {
			return
		}
		in := src
		if k.queued >= k.o.MaxQueued {
			in = nil
		}
		select {
		case it, ok := <-in:
			if !ok {
				src = nil
				continue
			}
			key, err := callKey(k.o.Key, it)
			if err != nil {
				_ = it.Completion.Fail(err)
				continue
			}
			q := k.queues[key]
			if q == nil {
				q = &keyQueue[In]{}
				k.queues[key] = q
			}
			q.items = append(q.items, it)
			k.queued++
			if !q.active && len(q.items) == 1 {
				k.ready = append(k.ready, key)
			}
		case key := <-done:
			k.busy--
			q := k.queues[key]
			q.active = false
			if len(q.items) > 0 {
				k.ready = append(k.ready, key)
			} else {
				delete(k.queues, key)
			}
		}
	}
}

// callKey returns the item's key; a panic in the key function fails the
// item with a *ports.PanicError.
func callKey[In any](key func(flow.Item[In]) string, it flow.Item[In]) (s string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ports.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return key(it), nil
}
