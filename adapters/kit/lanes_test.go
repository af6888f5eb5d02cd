package kit_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestLanesKeepEachStreamsOrder: jobs of one stream run in the order
// handed, whatever the lanes; Wait returns once all have run.
func TestLanesKeepEachStreamsOrder(t *testing.T) {
	l := kit.NewLanes(3)
	var mu sync.Mutex
	got := map[int][]int{}
	for i := range 300 {
		stream := i % 7
		l.Do(stream, func() {
			mu.Lock()
			got[stream] = append(got[stream], i)
			mu.Unlock()
		})
	}
	l.Wait()
	mu.Lock()
	for stream, seq := range got {
		if len(seq) == 0 || !slices.IsSorted(seq) {
			t.Fatalf("stream %d ran %v, want its jobs in the order handed", stream, seq)
		}
	}
	n := 0
	for _, seq := range got {
		n += len(seq)
	}
	mu.Unlock()
	if n != 300 {
		t.Fatalf("Wait returned with %d of 300 jobs run", n)
	}
	l.Close()
}
