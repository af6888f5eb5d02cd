package kafka

import (
	"errors"
	"fmt"
)

// ErrRevoked is returned by Settle for a delivery whose partition was
// revoked (a rebalance moved it, or the subscription stopped) before the
// settlement was recorded or committed. Nothing was committed for it: the
// partition's new owner redelivers the message (at least once). Test with
// errors.Is.
var ErrRevoked = errors.New("kafka: partition revoked")

// RevokedError names the revoked partition. It matches ErrRevoked.
type RevokedError struct {
	Topic      string // physical topic
	Partition  int32
	Generation int32 // the consumer-group generation that owned it
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("kafka: partition %s/%d revoked (generation %d): not committed, the new owner redelivers", e.Topic, e.Partition, e.Generation)
}

// Is reports whether target is ErrRevoked.
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// CommitError is an offset commit the broker refused or that could not be
// sent. It is reported through Subscription.Errors (and returned by Flush);
// Settle never returns it, since Settle only records. The committer
// retries the commit every Config.CommitRetry; if it never succeeds (the
// process dies, the partition is revoked) the recorded messages are
// redelivered, never lost.
type CommitError struct {
	Group     string
	Topic     string
	Partition int32
	Err       error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("kafka: commit %s %s/%d: %v", e.Group, e.Topic, e.Partition, e.Err)
}

func (e *CommitError) Unwrap() error { return e.Err }
