package redis

import (
	"context"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// lease makes a SingleActive group's instances take turns: only the
// holder of the key "<ns>:active:<stream>:<group>" reads the group's
// entries; the others stand by and try to take the key every quarter of
// its TTL (Options.SingleActiveLease). The holder renews it every third
// of the TTL and deletes it when it stops, so a stopped holder is
// replaced within a quarter TTL and a crashed one within the TTL plus a
// quarter. Failover is at-least-once: what the old holder read and did
// not settle stays pending for it and is claimed by the new one after
// Options.ClaimMinIdle (at once after a clean Stop, which releases it).
//
// A holder that cannot renew in time (a pause longer than the TTL, a lost
// connection) stops reading as soon as it notices, but entries it had
// already read may still be in its handlers while the new holder starts:
// a window of overlap of at most one read batch.
type lease struct {
	s    *sub
	key  string
	ttl  time.Duration
	held atomic.Bool
	wake chan struct{} // signalled when held turns true
}

var (
	renewLeaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
	releaseLeaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func newLease(s *sub) *lease {
	return &lease{s: s, key: s.c.o.Namespace + ":active:" + s.stream + ":" + s.group, ttl: s.c.o.SingleActiveLease, wake: make(chan struct{}, 1)}
}

// try takes or renews the lease once and reports whether it is held.
func (l *lease) try(ctx context.Context) bool {
	me := l.s.consumer
	var ok bool
	if l.held.Load() {
		n, err := renewLeaseScript.Run(ctx, l.s.c.rc, []string{l.key}, me, l.ttl.Milliseconds()).Int64()
		ok = err == nil && n == 1
		if err != nil && ctx.Err() == nil {
			l.s.warn("renew the single-active lease "+l.key+" (reading stops until it is held again)", err)
		}
	} else {
		var err error
		ok, err = l.s.c.rc.SetNX(ctx, l.key, me, l.ttl).Result()
		if err != nil {
			ok = false
			if ctx.Err() == nil {
				l.s.warn("take the single-active lease "+l.key, err)
			}
		}
	}
	if ok && !l.held.Swap(true) {
		l.s.c.o.Logger.Info("sluice redis: single-active lease taken; this instance now reads the group", "stream", l.s.stream, "group", l.s.group, "consumer", me)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	} else if !ok && l.held.Swap(false) {
		l.s.c.o.Logger.Warn("sluice redis: single-active lease lost; this instance stops reading", "stream", l.s.stream, "group", l.s.group, "consumer", me)
	}
	return ok
}

// run keeps the lease until ctx ends, then releases it.
func (l *lease) run(ctx context.Context) {
	defer l.s.wg.Done()
	for {
		d := l.ttl / 4
		if l.held.Load() {
			d = l.ttl / 3
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			l.try(ctx)
		case <-ctx.Done():
			t.Stop()
			if l.held.Swap(false) {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = releaseLeaseScript.Run(rctx, l.s.c.rc, []string{l.key}, l.s.consumer).Err()
				cancel()
			}
			return
		}
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
