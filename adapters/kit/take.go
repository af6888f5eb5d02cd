package kit

import "context"

// Take is a driver's read of a client that pushes into a Go channel (a
// delivery channel): it waits for the first value, or until ctx is done,
// then appends to buf what else c holds without waiting, up to max values
// in all (max >= 1). open is false once c is closed; the values received
// before are returned with it.
func Take[T any](ctx context.Context, c <-chan T, max int, buf []T) (vals []T, open bool, err error) {
	select {
	case v, ok := <-c:
		if !ok {
			return buf, false, nil
		}
		buf = append(buf, v)
	case <-ctx.Done():
		return buf, true, ctx.Err()
	}
	for len(buf) < max {
		select {
		case v, ok := <-c:
			if !ok {
				return buf, false, nil
			}
			buf = append(buf, v)
		default:
			return buf, true, nil
		}
	}
	return buf, true, nil
}

// Poll returns a value of c if one is there, without waiting; ok is false
// when none is, or c is closed.
func Poll[T any](c <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-c:
	default:
	}
	return v, ok
}
