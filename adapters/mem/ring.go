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
	return v, true
}

// Clear removes every element, keeping the storage.
func (r *ring[T]) Clear() {
	clear(r.buf)
	r.head, r.n = 0, 0
}

// grow makes room for one more element. The capacity stays a power of
// two so indexes wrap with a mask.
func (r *ring[T]) grow() {
	if r.n < len(r.buf) {
		return
	}
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]T, size)
	k := copy(buf, r.buf[r.head:])
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}
