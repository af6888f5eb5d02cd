package ports

import (
	"errors"
	"fmt"
)

// InstanceGuard is how an adapter keeps two running Broadcast
// subscriptions from sharing one SubscriptionSpec.Instance. Two such
// subscriptions would split or steal the instance's copy of every
// message, so one of them would silently miss what it was meant to see.
type InstanceGuard int

const (
	// InstanceUnguarded: nothing notices a shared Instance.
	InstanceUnguarded InstanceGuard = iota
	// InstanceRefused: a second running subscription with the same
	// Instance, from any process, is refused at Subscribe with an error
	// matching ErrInstanceShared and ErrInvalid that names
	// SubscriptionSpec.Instance. Where the broker has no lock for it the
	// check is not atomic (two subscriptions starting at the same moment
	// can both pass); the adapter's documentation says so.
	InstanceRefused
	// InstanceRefusedInProcess: as InstanceRefused among the adapters of
	// one process only; the broker offers no way to see another
	// process's subscription (the adapter's documentation says so).
	InstanceRefusedInProcess
	// InstanceDetected: the broker cannot refuse the second subscription
	// (it hands the instance's state over to the newcomer), but the
	// adapter notices: one of the two reports an error matching
	// ErrInstanceShared on its Errors channel, logs it and stops
	// receiving, so no instance silently receives nothing.
	InstanceDetected
)

func (g InstanceGuard) String() string {
	switch g {
	case InstanceRefused:
		return "refused"
	case InstanceRefusedInProcess:
		return "refused-in-process"
	case InstanceDetected:
		return "detected"
	}
	return "none"
}

// ErrInstanceShared reports two running Broadcast subscriptions with one
// SubscriptionSpec.Instance (see InstanceGuard).
var ErrInstanceShared = errors.New("two running instances share one Instance")

// InstanceSharedError refuses a Broadcast subscription whose Instance is
// already running. It matches ErrInstanceShared and ErrInvalid.
type InstanceSharedError struct {
	Instance string
	// Where says where the running one was seen (the broker's answer).
	Where string
}

func (e *InstanceSharedError) Error() string {
	where := ""
	if e.Where != "" {
		where = " (" + e.Where + ")"
	}
	return fmt.Sprintf("SubscriptionSpec.Instance %q already has a running Broadcast subscription%s: two running instances cannot share one Instance; give each its own (or leave it empty for a random one), or stop the other first",
		e.Instance, where)
}

// Is matches ErrInstanceShared and ErrInvalid.
func (e *InstanceSharedError) Is(target error) bool {
	return target == ErrInstanceShared || target == ErrInvalid
}
