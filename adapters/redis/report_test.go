package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

// A single-active reader whose lease another holder took reports the loss
// on its subscription's Errors, not only in the log.
func TestLostLeaseIsReportedOnErrors(t *testing.T) {
	srv := redistest.Own(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := redis.New(ctx, redis.Options{Addr: srv.Addr, Durability: redis.DurabilityNone, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "leased", Group: "g", SingleActive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())

	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Protocol: 2})
	defer rc.Close()
	var keys []string
	for len(keys) == 0 { // the subscription takes its lease on its first renewal tick
		if keys, err = rc.Keys(ctx, "*:active:*").Result(); err != nil || ctx.Err() != nil {
			t.Fatalf("the single-active lease key was never set: %v, %v", err, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond) // poll pacing, bounded by ctx
	}
	if err := rc.Set(ctx, keys[0], "another-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-sub.Errors():
			var be *ports.BrokerError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), "single-active lease") {
				t.Fatalf("Errors gave %v (%T), want a *ports.BrokerError naming the single-active lease", err, err)
			}
			return
		case <-ctx.Done():
			t.Fatal("the lost lease was not reported on Errors within 30s")
		}
	}
}
