package kit_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// wire records the acks an AckWriter sends and hands each to the test.
type wire struct {
	mu   sync.Mutex
	acks []string
	sent chan string
}

func newWire() *wire { return &wire{sent: make(chan string, 64)} }

func (w *wire) ack(tag uint64, cumulative bool) error {
	a := fmt.Sprintf("%d/%v", tag, cumulative)
	w.mu.Lock()
	w.acks = append(w.acks, a)
	w.mu.Unlock()
	w.sent <- a
	return nil
}

func (w *wire) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acks)
}

func (w *wire) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-w.sent:
		if got != want {
			t.Fatalf("ack %s; want %s", got, want)
		}
	case <-time.After(wait):
		t.Fatalf("no ack within %v; want %s", wait, want)
	}
}

// TestAckWriterWritesAtThresholdOrInterval: Settle does no I/O; the writer
// acks the settled prefix with one cumulative ack at once when the
// threshold is ready, and within the interval otherwise.
func TestAckWriterWritesAtThresholdOrInterval(t *testing.T) {
	t.Run("threshold", func(t *testing.T) {
		w := newWire()
		a := kit.NewAckWriter(w.ack, time.Hour, 3) // the interval never ends the wait
		defer a.Stop()
		for tag := uint64(1); tag <= 4; tag++ {
			a.Add(tag)
		}
		if n := a.Settle([]uint64{2, 1}); n != 0 {
			t.Fatalf("Settle: %d unknown", n)
		}
		if got := w.all(); len(got) != 0 {
			t.Fatalf("acks below the threshold before the interval: %v", got)
		}
		a.Settle([]uint64{3})
		w.expect(t, "3/true")
	})
	t.Run("interval", func(t *testing.T) {
		w := newWire()
		a := kit.NewAckWriter(w.ack, time.Millisecond, 100)
		defer a.Stop()
		a.Add(1)
		a.Add(2)
		a.Settle([]uint64{1})
		w.expect(t, "1/true")
		if n := a.Settle([]uint64{1, 9}); n != 2 {
			t.Fatalf("Settle of an acked and an unknown tag: %d unknown; want 2", n)
		}
	})
}

// TestAckWriterFlushesAboveAGap: a tag settled above an unsettled one waits
// for it; FlushIfFull acks it singly once the window is full of such tags,
// and Stop ends the writer and acks what is settled, never the unsettled.
func TestAckWriterFlushesAboveAGap(t *testing.T) {
	w := newWire()
	a := kit.NewAckWriter(w.ack, time.Hour, 100)
	for tag := uint64(1); tag <= 3; tag++ {
		a.Add(tag)
	}
	a.Settle([]uint64{2})
	if err := a.FlushIfFull(4); err != nil || len(w.all()) != 0 {
		t.Fatalf("FlushIfFull(4) with 3 out: %v, acks %v; want none", err, w.all())
	}
	if err := a.FlushIfFull(3); err != nil {
		t.Fatal(err)
	}
	w.expect(t, "2/false")
	a.Settle([]uint64{3})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	w.expect(t, "3/false")
	if err := a.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
	if got := w.all(); !slices.Equal(got, []string{"2/false", "3/false"}) {
		t.Fatalf("acks %v; want [2/false 3/false] (tag 1 never settled)", got)
	}
}
