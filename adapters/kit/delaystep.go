package kit

import (
	"math"
	"time"
)

// DelayStep rounds d up to the grid of delays of (1+step)^k milliseconds
// (k = 0, 1, …; step > 0), in milliseconds: a broker without a delay per
// message but with a time to live per queue or topic keeps one delay queue
// per step it uses, and a delay waits in the first at or above it — never
// early, at most a factor 1+step late.
func DelayStep(d time.Duration, step float64) int64 {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 1
	}
	k := math.Ceil(math.Log(ms) / math.Log1p(step))
	b := int64(math.Ceil(math.Pow(1+step, k)))
	return max(b, int64(math.Ceil(ms))) // guard against floating error
}
