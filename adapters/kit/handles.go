package kit

// Keys returns key of each of a settlement's handles (each an H, as the
// driver's records carry them): the broker's ids of the deliveries a
// SendAcks or SendRequeues call names.
func Keys[H, K any](handles []any, key func(H) K) []K {
	out := make([]K, len(handles))
	for i, h := range handles {
		out[i] = key(h.(H))
	}
	return out
}
