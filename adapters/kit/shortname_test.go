package kit_test

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestShortName: long names are cut to the limit with a hash that keeps
// them distinct; short ones are unchanged.
func TestShortName(t *testing.T) {
	if kit.ShortName("short", 200) != "short" {
		t.Fatal("a short name was changed")
	}
	long := strings.Repeat("x", 250)
	a, b := kit.ShortName(long+"a", 200), kit.ShortName(long+"b", 200)
	if len(a) != 200 || len(b) != 200 || a == b || a != kit.ShortName(long+"a", 200) {
		t.Fatalf("%q / %q: want distinct, stable names of 200 bytes", a, b)
	}
}
