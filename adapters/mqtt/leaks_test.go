package mqtt_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

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
