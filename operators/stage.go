package operators

import (
	"fmt"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// cancelRest reads in until it is closed and cancels every item: an
// operator that has stopped working must still keep upstream flowing.
func cancelRest[T any](in <-chan flow.Item[T], cause error) {
	for it := range in {
		_ = it.Completion.Cancel(cause)
	}
}

// cancelled completes it as cancelled when its context is done.
func cancelled[T any](it flow.Item[T]) bool {
	if err := it.Ctx.Err(); err != nil {
		_ = it.Completion.Cancel(err)
		return true
	}
	return false
}

// invalid panics with a validation error: operator options are checked
// when the pipeline is built.
func invalid(op, field, reason string) {
	panic(fmt.Errorf("operators: %s: %w", op, &ports.ValueError{Field: field, Reason: reason}))
}
