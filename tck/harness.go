package tck

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// Harness connects the kit to one adapter and its broker. The kit makes a
// fresh Harness for every subtest and closes it at the end of that subtest.
type Harness interface {
	// MakeAdapter returns a new adapter instance — a new "process" — that
	// talks to the harness's broker under the harness's namespace. The kit
	// calls it several times per subtest: two at once for competing or
	// broadcast instances, and again to restart an instance in the same
	// group. The kit closes every adapter it makes.
	MakeAdapter(ctx context.Context) (ports.Adapter, error)
	// Close releases what the harness holds (not the broker, which may be
	// shared by every subtest).
	Close()
}

// NewHarness makes a Harness for one subtest. Skipping or failing t is
// allowed (for example when no broker is reachable and CI is not set).
type NewHarness func(ctx context.Context, t *testing.T) (Harness, error)

// DeadLetterFaults is implemented by harnesses that can make the adapter's
// dead-letter publishes fail, so the kit can prove that a failed
// dead-letter publish never settles the original.
type DeadLetterFaults interface {
	// FailDeadLetters makes every dead-letter publish of adapters made by
	// this harness fail (true) or succeed again (false).
	FailDeadLetters(fail bool)
}

// SendFaults is implemented by harnesses that can make the broker refuse
// or fail to confirm a publish, so the kit can check that Send reports it.
type SendFaults interface {
	// FailSends makes the next publishes of adapters made by this harness
	// go unconfirmed (true) or confirmed again (false).
	FailSends(fail bool)
}
