package mqtt_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The leak excuse after mochi's deadlock claims mochi's own goroutines and
// the embedded broker's shutdown waiting for them, and nothing of the
// adapter's, even when mochi's code is deeper in its stack.
func TestStrandedByDeadlockClaimsOnlyMochisGoroutines(t *testing.T) {
	cases := []struct {
		name, stack string
		want        bool
	}{
		{"mochi write loop", "Goroutine 7 in state chan receive, with github.com/mochi-mqtt/server/v2.(*Client).WriteLoop on top of the stack:\n" +
			"goroutine 7 [chan receive]:\ngithub.com/mochi-mqtt/server/v2.(*Client).WriteLoop(0xc000)\n\t/x/clients.go:1 +0x1\n", true},
		{"mochi reader on the inflight lock", "Goroutine 8 in state sync.RWMutex.RLock, with sync.runtime_SemacquireRWMutexR on top of the stack:\n" +
			"goroutine 8 [sync.RWMutex.RLock]:\nsync.runtime_SemacquireRWMutexR(0x1)\n\t/x:1\nsync.(*RWMutex).RLock(...)\n\t/x:2\n" +
			"github.com/mochi-mqtt/server/v2.(*Inflight).GetAll(0xc0)\n\t/x:3\n", true},
		{"embedded shutdown waiting for connections", "Goroutine 9 in state sync.WaitGroup.Wait, with sync.runtime_SemacquireWaitGroup on top of the stack:\n" +
			"goroutine 9 [sync.WaitGroup.Wait]:\nsync.runtime_SemacquireWaitGroup(0x1)\n\t/x:1\nsync.(*WaitGroup).Wait(0xc0)\n\t/x:2\n" +
			"github.com/sluicemq/sluice/adapters/mqtt/embedded.(*Broker).shutdown(0xc0)\n\t/x:3\n", true},
		{"embedded shutdown elsewhere", "Goroutine 10 in state chan receive, with github.com/sluicemq/sluice/adapters/mqtt/embedded.(*Broker).shutdown on top of the stack:\n" +
			"goroutine 10 [chan receive]:\ngithub.com/sluicemq/sluice/adapters/mqtt/embedded.(*Broker).shutdown(0xc0)\n\t/x:3\n", false},
		{"adapter goroutine above a mochi frame", "Goroutine 11 in state select, with github.com/sluicemq/sluice/adapters/mqtt.(*subscription).run on top of the stack:\n" +
			"goroutine 11 [select]:\ngithub.com/sluicemq/sluice/adapters/mqtt.(*subscription).run(0xc0)\n\t/x:1\n" +
			"github.com/mochi-mqtt/server/v2.(*Server).inlineClient(0xc0)\n\t/x:2\n", false},
	}
	for _, c := range cases {
		if got := strandedByDeadlock(c.stack); got != c.want {
			t.Errorf("%s: strandedByDeadlock = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTestScriptRunsConnectionFaultsWithoutRace: under -race the kit keeps
// producers off the faulted proxy and skips broker-restart (ClientRace),
// so the test script must run them in a go test invocation without -race.
func TestTestScriptRunsConnectionFaultsWithoutRace(t *testing.T) {
	b, err := os.ReadFile("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "exec" {
			f = f[1:]
		}
		if len(f) < 3 || f[0] != "go" || f[1] != "test" || slices.Contains(f, "-race") || !slices.Contains(f, "./adapters/mqtt/") {
			continue
		}
		i := slices.Index(f, "-run")
		if i < 0 || i+1 >= len(f) {
			continue
		}
		pattern := strings.Trim(f[i+1], "'\"")
		for _, s := range []string{"mosquitto/broker-restart", "mosquitto/conn-reset", "embedded/blackhole"} {
			if ok, err := regexp.MatchString(pattern, "TestLedgerFaults/"+s); err != nil || !ok {
				t.Fatalf("scripts/test.sh runs mqtt without -race with -run %q, which does not select TestLedgerFaults/%s (err %v)", pattern, s, err)
			}
		}
		return
	}
	t.Fatal("scripts/test.sh has no go test of ./adapters/mqtt/ without -race running TestLedgerFaults' connection scenarios")
}
