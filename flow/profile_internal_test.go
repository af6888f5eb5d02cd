package flow

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Explicit settlement options win over a profile, whatever their order.
func TestExplicitSettleOptionsWinOverAProfile(t *testing.T) {
	sp := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	for _, opts := range [][]Option{
		{WithProfile(ProfileThroughput), WithSettleLinger(time.Hour), WithSettleBatch(3), WithSettleConcurrency(2)},
		{WithSettleLinger(time.Hour), WithSettleBatch(3), WithSettleConcurrency(2), WithProfile(ProfileThroughput)},
	} {
		p := New(nil, sp, opts...)
		if c := p.cfg.settle; c.linger != time.Hour || c.maxBatch != 3 || c.concurrency != 2 {
			t.Errorf("settle config %+v: want the explicit linger 1h, batch 3, concurrency 2", c)
		}
	}
	p := New(nil, sp, WithProfile(ProfileThroughput))
	if c := p.cfg.settle; c.linger != 5*time.Millisecond || c.maxBatch != 256 || c.concurrency != 8 || p.cfg.workers != 8 {
		t.Errorf("ProfileThroughput settle config %+v workers %d: want linger 5ms, batch 256, concurrency 8, 8 workers", c, p.cfg.workers)
	}
	p = New(nil, sp, WithProfile(ProfileLatency))
	if c := p.cfg.settle; c.linger != 0 || c.concurrency != 8 || p.cfg.workers != 32 {
		t.Errorf("ProfileLatency settle config %+v workers %d: want no linger, concurrency 8, 32 workers", c, p.cfg.workers)
	}
}
