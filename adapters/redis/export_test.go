package redis

import (
	"strings"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// Faults switch test faults on adapters made with WithFaults.
type Faults struct{ failDL, failSend atomic.Bool }

// FailDeadLetters makes publishes to dead-letter topics fail (true) or
// succeed.
func (f *Faults) FailDeadLetters(v bool) { f.failDL.Store(v) }

// FailSends makes every publish unconfirmed (true) without writing it, or
// work again (false).
func (f *Faults) FailSends(v bool) { f.failSend.Store(v) }

func (f *Faults) refuse(t ports.Topic) bool {
	return f.failSend.Load() || f.failDL.Load() && strings.HasSuffix(string(t), ports.DeadLetterSuffix)
}

// WithFaults returns o with fault switches for tests.
func WithFaults(o Options, f *Faults) Options { o.faults = f; return o }
