package kit

import "sync"

// Originals keeps, for the deliveries a driver holds, what it needs to
// write a copy of one as the original was written: a foreign producer's
// encoding that the decoded Message does not keep (a Redis field/value
// entry's fields, byte for byte). The portable layer sends a dead-letter
// copy through the driver's SendBatch with ports.HeaderID set to the
// delivery's identity; the driver looks the original up under it. An
// identity held by several deliveries at once (one message in two groups)
// is kept until the last lets go. The zero value is ready; it is safe for
// concurrent use.
type Originals[T any] struct {
	mu sync.Mutex
	m  map[string]*original[T]
}

type original[T any] struct {
	v       T
	holders int
}

// Hold keeps v under id for one more holder (the first holder's v stays).
func (o *Originals[T]) Hold(id string, v T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	x := o.m[id]
	if x == nil {
		if o.m == nil {
			o.m = map[string]*original[T]{}
		}
		x = &original[T]{v: v}
		o.m[id] = x
	}
	x.holders++
}

// Release lets go of one holder of id; the last one's release forgets it.
func (o *Originals[T]) Release(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if x := o.m[id]; x != nil {
		if x.holders--; x.holders <= 0 {
			delete(o.m, id)
		}
	}
}

// Lookup returns what is kept under id.
func (o *Originals[T]) Lookup(id string) (v T, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if x := o.m[id]; x != nil {
		return x.v, true
	}
	return v, false
}
