package kit_test

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestDelayStepRoundsUpWithinOneStep: a delay is never rounded down, and
// at most one grid step (plus a millisecond of rounding) up; the steps
// grow with the delay.
func TestDelayStepRoundsUpWithinOneStep(t *testing.T) {
	prev := int64(0)
	for ms := 0; ms < 200000; ms += 1 + ms/50 {
		b := kit.DelayStep(time.Duration(ms)*time.Millisecond, 0.05)
		if b < int64(ms) || float64(b) > float64(ms)*1.05+1 || b < prev {
			t.Fatalf("delay %dms: step %dms (previous %dms)", ms, b, prev)
		}
		prev = b
	}
}
