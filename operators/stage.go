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

// invalid is the validation error of an operator's options; stages report
// it through flow.Invalid, so the pipeline's Start returns it.
func invalid(op, field, reason string) error {
	return fmt.Errorf("operators: %s: %w", op, &ports.ValueError{Field: field, Reason: reason})
}
