package wmtest_test

import (
	"testing"

	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
)

// The Watermill multiplier excuse claims a forwarder blocked sending (the
// helper's defect) and its waiter, never a forwarder blocked receiving,
// which waits for the adapter to close its channel.
func TestStrandedByMultiplierClaimsOnlyBlockedSends(t *testing.T) {
	const pkg = "github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe."
	send := "Goroutine 5 in state chan send, with " + pkg + "func2 on top of the stack:\ngoroutine 5 [chan send]:\n" + pkg + "func2()\n\t/x:1\n"
	recv := "Goroutine 6 in state chan receive, with " + pkg + "func2 on top of the stack:\ngoroutine 6 [chan receive]:\n" + pkg + "func2()\n\t/x:1\n"
	wait := "Goroutine 7 in state sync.WaitGroup.Wait, with sync.runtime_SemacquireWaitGroup on top of the stack:\ngoroutine 7 [sync.WaitGroup.Wait]:\n" +
		"sync.runtime_SemacquireWaitGroup(0x1)\n\t/x:1\nsync.(*WaitGroup).Wait(0xc0)\n\t/x:2\n" + pkg + "func3()\n\t/x:3\n"
	other := "Goroutine 8 in state chan receive, with github.com/sluicemq/sluice/adapters/kafka.(*subscription).run on top of the stack:\n" +
		"goroutine 8 [chan receive]:\ngithub.com/sluicemq/sluice/adapters/kafka.(*subscription).run()\n\t/x:1\n"
	for stack, want := range map[string]bool{send: true, recv: false, wait: true, other: false} {
		if got := wmtest.StrandedByMultiplier(stack); got != want {
			t.Errorf("StrandedByMultiplier = %v, want %v, for:\n%s", got, want, stack)
		}
	}
}
