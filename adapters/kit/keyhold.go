package kit

// KeyHold hands out one item per non-empty key at a time: an item whose key
// has one out waits, in order, until that key is released. Items with the
// empty key are never held. The zero value is ready; not safe for
// concurrent use.
type KeyHold[T any] struct {
	keys    map[string][]T // a key with an item out: the items waiting behind it
	waiting int
}

// Admit reports whether *v goes out now; if not, a copy waits behind its
// key (v is read only then).
func (k *KeyHold[T]) Admit(key string, v *T) bool {
	if key == "" {
		return true
	}
	if q, busy := k.keys[key]; busy {
		k.keys[key] = append(q, *v)
		k.waiting++
		return false
	}
	if k.keys == nil {
		k.keys = map[string][]T{}
	}
	k.keys[key] = nil
	return true
}

// Release ends the item out with key and returns the next one waiting,
// which is out now.
func (k *KeyHold[T]) Release(key string) (next T, ok bool) {
	if k.waiting == 0 { // no key has items waiting: one map operation
		delete(k.keys, key)
		return next, false
	}
	q, busy := k.keys[key]
	switch {
	case !busy:
	case len(q) == 0:
		delete(k.keys, key)
	default:
		k.keys[key] = q[1:]
		k.waiting--
		return q[0], true
	}
	return next, false
}

// Waiting is the number of items waiting behind their key.
func (k *KeyHold[T]) Waiting() int { return k.waiting }
