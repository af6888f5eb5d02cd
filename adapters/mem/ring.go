package mem

// ring is a growable FIFO ring buffer. The zero value is empty and ready.
// It is not safe for concurrent use; queue guards it with its mutex.
type ring[T any] struct {
	buf  []T
	head int // index of the first element
	n    int // number of elements
}

// Len returns the number of elements.
func (r *ring[T]) Len() int { return r.n }

// PushBack appends v.
func (r *ring[T]) PushBack(v T) {
	r.grow()
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// PushFront prepends v.
func (r *ring[T]) PushFront(v T) {
	r.grow()
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = v
	r.n++
}

// Front returns the first element without removing it.
func (r *ring[T]) Front() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	return r.buf[r.head], true
}

// At returns the i-th element (0 is the front); i must be below Len.
func (r *ring[T]) At(i int) T { return r.buf[(r.head+i)&(len(r.buf)-1)] }

// PopFront removes and returns the first element; ok is false when empty.
func (r *ring[T]) PopFront() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	var zero T
	v = r.buf[r.head]
	r.buf[r.head] = zero // release references for the GC
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
	}
	if len(r.buf) > minShrink && r.n < len(r.buf)/4 {
		r.resize(len(r.buf) / 2) // a drained burst gives its memory back
	}
	return v, true
}

// minShrink is the capacity below which a ring never shrinks.
const minShrink = 256

// Clear removes every element and releases the storage.
func (r *ring[T]) Clear() {
	r.buf, r.head, r.n = nil, 0, 0
}

// grow makes room for one more element. The capacity stays a power of
// two so indexes wrap with a mask.
func (r *ring[T]) grow() {
	if r.n < len(r.buf) {
		return
	}
	r.resize(max(2*len(r.buf), 16))
}

// resize moves the elements, in order, to a new buffer of size (a power of
// two, at least r.n).
func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	if end := r.head + r.n; end <= len(r.buf) {
		copy(buf, r.buf[r.head:end])
	} else {
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:end-len(r.buf)])
	}
	r.buf, r.head = buf, 0
}
