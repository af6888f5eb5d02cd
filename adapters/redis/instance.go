package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/ports"
)

// instanceClaimTTL is how long a Broadcast instance's claim outlives its
// holder's last renewal (renewed every third of it): the time after which
// a crashed holder's Instance can be taken again.
var instanceClaimTTL = 6 * time.Second

// instanceClaim is a running Broadcast subscription's claim on its
// Instance: the key <heartbeat key>:claim, set with SET NX to a token of
// its own and renewed while it runs, so that a second running
// subscription with the same Instance, from any process, is refused at
// Subscribe instead of sharing the instance's consumer group (each would
// receive part of the instance's copy).
type instanceClaim struct {
	s      *sub
	key    string
	token  string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// renewClaim extends the claim if it is still ours (1), takes it again
// if it expired (1), and answers 0 when another holder has it.
// KEYS[1] claim; ARGV token, ttl ms.
var renewClaim = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if v == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return 1 end
return 0
`)

// releaseClaim deletes the claim if it is ours. KEYS[1] claim; ARGV token.
var releaseClaim = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// claimInstance takes the Instance of a Broadcast subscription, or
// refuses it with a *ports.InstanceSharedError.
func (s *sub) claimInstance(ctx context.Context) error {
	if !s.broadcast {
		return nil
	}
	c := &instanceClaim{s: s, key: s.hbKey + ":claim", token: s.consumer}
	ok, err := s.c.rc.SetNX(ctx, c.key, c.token, instanceClaimTTL).Result()
	if err != nil {
		return fmt.Errorf("redis: claim broadcast instance %q (%s): %w", s.spec.Instance, c.key, err)
	}
	if !ok {
		return &ports.InstanceSharedError{Instance: s.spec.Instance, Where: fmt.Sprintf(
			"the claim key %s is held by another subscription; a crashed holder's claim expires %v after its last renewal", c.key, instanceClaimTTL)}
	}
	s.instance = c
	return nil
}

// start renews the claim every third of its TTL until release.
func (c *instanceClaim) start() {
	if c == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(instanceClaimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := renewClaim.Run(ctx, c.s.c.rc, []string{c.key}, c.token, ms(instanceClaimTTL)).Int()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				c.s.warn(fmt.Sprintf("renew the claim of broadcast instance %q (retried in %v)", c.s.spec.Instance, instanceClaimTTL/3), err)
			case n == 0:
				c.s.warn("broadcast instance shared", &ports.InstanceSharedError{Instance: c.s.spec.Instance, Where: fmt.Sprintf(
					"its claim key %s expired while this subscription ran (Redis unreachable for longer than %v) and another subscription took it", c.key, instanceClaimTTL)})
			}
		}
	}()
}

// release stops renewing and deletes the claim if it is still ours.
func (c *instanceClaim) release(ctx context.Context) error {
	if c == nil {
		return nil
	}
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	if err := releaseClaim.Run(ctx, c.s.c.rc, []string{c.key}, c.token).Err(); err != nil {
		return fmt.Errorf("release the claim of broadcast instance %q (it expires within %v): %w", c.s.spec.Instance, instanceClaimTTL, err)
	}
	return nil
}
