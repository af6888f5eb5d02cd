package kit

import (
	"strconv"
	"testing"
	"unsafe"
)

func TestNamesIntern(t *testing.T) {
	var n Names
	a, b := n.Intern([]byte("sluice-id")), n.Intern([]byte("sluice-id"))
	if a != "sluice-id" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("Intern: %q and %q are not one string", a, b)
	}
	for i := range 2 * maxNames {
		n.Intern([]byte(strconv.Itoa(i)))
	}
	if len(n.m) != maxNames {
		t.Errorf("kept %d names, want %d", len(n.m), maxNames)
	}
	if got := n.Intern([]byte("past-the-bound")); got != "past-the-bound" {
		t.Errorf("Intern past the bound = %q", got)
	}
}
