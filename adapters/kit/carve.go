package kit

// Carve returns n zero elements taken from the front of *slab, first
// replacing *slab with a new chunk of max(chunk, n) when it holds fewer:
// consecutive records' small values share an allocation. The result's
// capacity is n, so appending to it never writes into the slab. A value
// kept keeps its whole chunk in memory.
func Carve[T any](slab *[]T, n, chunk int) []T {
	if len(*slab) < n {
		*slab = make([]T, max(chunk, n))
	}
	s := (*slab)[:n:n]
	*slab = (*slab)[n:]
	return s
}
