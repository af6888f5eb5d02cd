package kit_test

import (
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestDefault: zero and negative values take the default, others stay.
func TestDefault(t *testing.T) {
	a, b, c := 0, -1.0, 7
	kit.Default(&a, 3)
	kit.Default(&b, 0.5)
	kit.Default(&c, 3)
	if a != 3 || b != 0.5 || c != 7 {
		t.Fatalf("got %v %v %v, want 3 0.5 7", a, b, c)
	}
}
