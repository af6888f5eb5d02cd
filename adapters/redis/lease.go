package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// instanceClaimTTL: how long a crashed holder keeps an instance's claim.
const instanceClaimTTL = 6 * time.Second

// lease returns s's lease of key (held under s's token), not taken yet: a
// Broadcast instance's claim refuses a second subscription of the same
// Instance from any process; a SingleActive group's lease lets only its
// holder read (a holder that could not renew may still handle one read
// batch while the next starts).
func (s *sub) lease(key, what string, ttl time.Duration) *kit.Lease {
	take := func(ctx context.Context) (bool, error) {
		n, err := leaseScript.Run(ctx, s.c.rc, []string{key}, s.token, ttl.Milliseconds()).Int()
		return n == 1, err
	}
	drop := func(ctx context.Context) error { return releaseScript.Run(ctx, s.c.rc, []string{key}, s.token).Err() }
	return kit.NewLease(ttl, take, drop, s.c.o.Logger.With("lease", "redis "+what, "key", key, "consumer", s.consumer))
}

// claimInstance takes a Broadcast subscription's Instance, or refuses it
// with a *ports.InstanceSharedError.
func (s *sub) claimInstance(ctx context.Context) error {
	key := s.hbKey + ":claim"
	s.instance = s.lease(key, "broadcast instance claim", instanceClaimTTL)
	ok, err := s.instance.Try(ctx)
	if err != nil {
		return fmt.Errorf("redis: claim broadcast instance %q (%s): %w", s.spec.Instance, key, err)
	}
	if !ok {
		return &ports.InstanceSharedError{Instance: s.spec.Instance, Where: fmt.Sprintf(
			"the claim key %s is held by another subscription; a crashed holder's claim expires %v after its last renewal", key, instanceClaimTTL)}
	}
	return nil
}
