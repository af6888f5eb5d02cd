package kit_test

import (
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestRuns: marks settled in any order coalesce into one run per log, gap
// and change of outcome, sorted by log and offset; an offset marked twice
// is a run of its own.
func TestRuns(t *testing.T) {
	type m = kit.Mark[int32, int8]
	type r = kit.Run[int32, int8]
	marks := []m{{1, 12, 1}, {0, 5, 1}, {1, 10, 1}, {0, 7, 2}, {0, 6, 1}, {1, 11, 1}, {0, 9, 1}, {1, 11, 1}}
	want := []r{{0, 5, 6, 1}, {0, 7, 7, 2}, {0, 9, 9, 1}, {1, 10, 11, 1}, {1, 11, 12, 1}}
	if got := kit.Runs(marks); !slices.Equal(got, want) {
		t.Fatalf("Runs = %v, want %v", got, want)
	}
	if got := kit.Runs[int32, int8](nil); len(got) != 0 {
		t.Fatalf("Runs(nil) = %v, want none", got)
	}
}
