package kit_test

import (
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestHeldLiveFailedAndSettled(t *testing.T) {
	var h kit.Held[string, *int]
	one, two, again := new(int), new(int), new(int)
	if !h.Add("1-0", one) || !h.Add("2-0", two) {
		t.Fatal("Add of new records refused")
	}
	if h.Add("1-0", again) {
		t.Fatal("a record held live was held again")
	}
	if h.Settle("1-0", again, true) {
		t.Fatal("Settle of a value the key is not held as succeeded")
	}
	if !h.Settle("1-0", one, true) || !h.Settle("2-0", two, false) {
		t.Fatal("Settle of held records failed")
	}
	if h.Settle("2-0", two, true) {
		t.Fatal("a failed record was settled again")
	}
	if live, all := h.Keys(false), h.Keys(true); len(live) != 0 || !slices.Equal(all, []string{"2-0"}) {
		t.Fatalf("Keys: live %v, all %v; want none live and the failed 2-0", live, all)
	}
	if !h.Add("2-0", again) {
		t.Fatal("a failed record handed out again was not held anew")
	}
	if live := h.Live(); len(live) != 1 || live[0] != again {
		t.Fatalf("Live = %v, want the record held anew", live)
	}
}
