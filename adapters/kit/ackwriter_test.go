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
		a := kit.NewAckWriter(w.ack, time.Hour, 3, 0) // the interval never ends the wait
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
		a := kit.NewAckWriter(w.ack, time.Millisecond, 100, 0)
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

// TestAckWriterFlushesAboveAGap: a tag settled above an unsettled one
// waits for it, and no single ack is written while the driver's receive
// is not waiting; once it waits with the broker's window full of tags
// out, the writer acks the waiting ones singly (the broker would push
// nothing more). Stop ends the writer and acks what is settled, never the
// unsettled.
func TestAckWriterFlushesAboveAGap(t *testing.T) {
	w := newWire()
	a := kit.NewAckWriter(w.ack, time.Millisecond, 100, 4)
	for tag := uint64(1); tag <= 4; tag++ {
		a.Add(tag)
	}
	a.Settle([]uint64{2, 3}) // they wait for tag 1
	select {
	case got := <-w.sent:
		t.Fatalf("ack %s written with no receive waiting", got)
	case <-time.After(50 * time.Millisecond): // the writer's interval is 1ms: time enough to write, if it wrongly did
	}
	a.Receiving(true)
	w.expect(t, "2/false")
	w.expect(t, "3/false")
	a.Settle([]uint64{4}) // 2 of 4 out: it waits for tag 1
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	w.expect(t, "4/false")
	if err := a.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
	if got := w.all(); !slices.Equal(got, []string{"2/false", "3/false", "4/false"}) {
		t.Fatalf("acks %v; want [2/false 3/false 4/false] (tag 1 never settled)", got)
	}
}

// TestAckWriterUnblocksAFullWindowOnSettle: while the receive waits with
// the window full of tags out, a settlement that leaves a settled tag
// above an unsettled one has the writer ack it singly without another
// call (the broker holds back the deliveries the receive waits for);
// with room in the window it waits, until a delivery fills it again.
func TestAckWriterUnblocksAFullWindowOnSettle(t *testing.T) {
	w := newWire()
	a := kit.NewAckWriter(w.ack, time.Millisecond, 100, 3)
	defer a.Stop()
	for tag := uint64(1); tag <= 3; tag++ {
		a.Add(tag)
	}
	a.Receiving(true)
	a.Settle([]uint64{3}) // 3 of 3 out, 3 waits for 1: the broker pushes no more
	w.expect(t, "3/false")
	a.Settle([]uint64{2}) // 2 of 3 out: the broker has room, 2 waits for 1
	a.Receiving(false)    // a delivery came
	a.Add(4)
	a.Receiving(true) // the window is full again
	w.expect(t, "2/false")
	if got := w.all(); !slices.Equal(got, []string{"3/false", "2/false"}) {
		t.Fatalf("acks %v; want [3/false 2/false]", got)
	}
}
