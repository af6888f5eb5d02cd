package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// lease is a key one subscription holds at a time, under its token:
// renewed every third of its TTL while held, tried every quarter while
// not, deleted on release. A Broadcast instance's claim refuses a second
// subscription of the same Instance from any process; a SingleActive
// group's lease lets only its holder read (a holder that could not renew
// may still handle one read batch while the next starts).
type lease struct {
	s    *sub
	key  string
	ttl  time.Duration
	what string
	held atomic.Bool
	wake chan struct{} // signalled when held turns true
}

// instanceClaimTTL: how long a crashed holder keeps an instance's claim.
const instanceClaimTTL = 6 * time.Second

// try takes or renews the lease once and reports whether it is held.
func (l *lease) try(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, l.s.c.rc, []string{l.key}, l.s.token, l.ttl.Milliseconds()).Int()
	switch ok := err == nil && n == 1; {
	case ok && !l.held.Swap(true):
		l.s.c.o.Logger.Info("sluice redis: "+l.what+" taken", "key", l.key, "consumer", l.s.consumer)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	case !ok && l.held.Swap(false):
		l.s.warn(l.what+" lost", fmt.Errorf("%s is held by another subscription or could not be renewed within %v: %v", l.key, l.ttl, err))
	case err != nil && ctx.Err() == nil:
		l.s.warn("take "+l.what+" "+l.key, err)
	}
	return l.held.Load(), err
}

// claimInstance takes a Broadcast subscription's Instance, or refuses it
// with a *ports.InstanceSharedError.
func (l *lease) claimInstance(ctx context.Context) error {
	ok, err := l.try(ctx)
	if err != nil {
		return fmt.Errorf("redis: claim broadcast instance %q (%s): %w", l.s.spec.Instance, l.key, err)
	}
	if !ok {
		return &ports.InstanceSharedError{Instance: l.s.spec.Instance, Where: fmt.Sprintf(
			"the claim key %s is held by another subscription; a crashed holder's claim expires %v after its last renewal", l.key, l.ttl)}
	}
	return nil
}

// run keeps the lease until ctx ends, then releases it.
func (l *lease) run(ctx context.Context) {
	defer l.s.wg.Done()
	defer l.release()
	for {
		d := l.ttl / 4
		if l.held.Load() {
			d = l.ttl / 3
		}
		select {
		case <-time.After(d):
			_, _ = l.try(ctx)
		case <-ctx.Done():
			return
		}
	}
}

func (l *lease) release() {
	if l != nil && l.held.Swap(false) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = releaseScript.Run(ctx, l.s.c.rc, []string{l.key}, l.s.token).Err()
	}
}

// wait blocks while the lease is not held; false when ctx ended.
func (l *lease) wait(ctx context.Context) bool {
	for !l.held.Load() {
		select {
		case <-l.wake:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
