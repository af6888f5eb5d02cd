package kit_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestKeysInHandleOrder(t *testing.T) {
	got := kit.Keys([]any{3, 1, 2}, strconv.Itoa)
	if !slices.Equal(got, []string{"3", "1", "2"}) {
		t.Fatalf("Keys = %v, want [3 1 2]", got)
	}
	if got := kit.Keys(nil, strconv.Itoa); len(got) != 0 {
		t.Fatalf("Keys of no handles = %v, want none", got)
	}
}
