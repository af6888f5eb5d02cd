package mem

import (
	"errors"

	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Settlement misuse errors: the portable layer's, the same on every
// adapter. Both wrap [ports.ErrInvalid]. Test with errors.Is.
var (
	// ErrAlreadySettled is returned by Settle for a delivery that was
	// already settled, or whose settlement is in progress in another
	// Settle call. Nothing is settled.
	ErrAlreadySettled = portable.ErrAlreadySettled
	// ErrForeignDelivery is returned by Settle for a delivery that was not
	// received from this subscription (another subscription's, another
	// adapter's, or one built by hand). Nothing is settled.
	ErrForeignDelivery = portable.ErrForeignDelivery
)

// ErrQueueFull is wrapped, together with ctx.Err(), by the error of a
// message that Send could not store because a queue of its topic stayed at
// its bound (see [WithMaxQueue]) until Send's ctx was done.
var ErrQueueFull = errors.New("mem: queue full")

func valueError(field, reason string) error {
	return &ports.ValueError{Field: field, Reason: reason}
}
