package kit

// Default sets *p to def when *p is zero or negative: an option whose
// unset value means "the default" (a timeout, a count, a fraction).
func Default[T ~int | ~int64 | ~float64](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}
