package kafka

import (
	"errors"
	"fmt"
)

// ErrRevoked is returned by Settle for a delivery whose partition was
// revoked (a rebalance moved it, or the subscription stopped) before its
// acknowledgement was recorded. Nothing was committed for it: the
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
