package kit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

var ctx0 = context.Background()

// ackLine records the batches RidingAcks's writer and Flush send, and the
// failures it reports.
type ackLine struct {
	mu       sync.Mutex
	fail     error
	sent     chan []int
	reported chan error
}

func newAckLine() *ackLine {
	return &ackLine{sent: make(chan []int, 16), reported: make(chan error, 16)}
}

func (l *ackLine) send(_ context.Context, hs []int) error {
	l.sent <- slices.Clone(hs)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fail
}

func (l *ackLine) report(err error) { l.reported <- err }

func (l *ackLine) expect(t *testing.T, want ...int) {
	t.Helper()
	select {
	case got := <-l.sent:
		if !slices.Equal(got, want) {
			t.Fatalf("sent %v; want %v", got, want)
		}
	case <-time.After(wait):
		t.Fatalf("nothing sent within %v; want %v", wait, want)
	}
}

func (l *ackLine) none(t *testing.T) {
	t.Helper()
	select {
	case got := <-l.sent:
		t.Fatalf("sent %v; want nothing", got)
	default:
	}
}

// A read takes what is pending, in settlement order, and the writer sends
// nothing of it (the read's failure is reported); what no read takes the
// writer sends within its interval.
func TestRidingAcksRideOnReadsOrGoWithTheWriter(t *testing.T) {
	l := newAckLine()
	a := kit.NewRidingAcks(l.send, l.report, time.Hour) // the writer never sends here
	_ = a.SendAcks(ctx0, []int{3, 1})
	_ = a.SendAcks(ctx0, []int{2})
	hs := a.Take()
	if !slices.Equal(hs, []int{3, 1, 2}) {
		t.Fatalf("Take = %v; want [3 1 2]", hs)
	}
	if again := a.Take(); again != nil {
		t.Fatalf("a second Take = %v; want nil", again)
	}
	a.Done(hs, errors.New("connection reset")) // the read's XACK failed
	select {
	case err := <-l.reported:
		if err == nil || !strings.Contains(err.Error(), "3 records") {
			t.Fatalf("reported %v; want the failure of the read's 3 acknowledgements", err)
		}
	case <-time.After(wait):
		t.Fatalf("the read's failure was not reported within %v", wait)
	}
	if err := a.FlushAcks(context.Background()); err != nil {
		t.Fatalf("FlushAcks with nothing pending: %v", err)
	}
	a.Stop()
	l.none(t)

	b := kit.NewRidingAcks(l.send, l.report, time.Millisecond)
	defer b.Stop()
	_ = b.SendAcks(ctx0, []int{7, 8})
	l.expect(t, 7, 8)
	if hs := b.Take(); hs != nil {
		t.Fatalf("Take after the writer sent = %v; want nil", hs)
	}
}

// Flush sends what is pending and waits for a batch a read is carrying;
// its failure is returned, the writer's reported.
func TestRidingAcksFlushWaitsForTheBatchOnARead(t *testing.T) {
	l := newAckLine()
	a := kit.NewRidingAcks(l.send, l.report, time.Hour)
	defer a.Stop()
	_ = a.SendAcks(ctx0, []int{1})
	riding := a.Take()
	_ = a.SendAcks(ctx0, []int{2})
	l.mu.Lock()
	l.fail = errors.New("connection reset")
	l.mu.Unlock()
	flushed := make(chan error, 1)
	go func() { flushed <- a.FlushAcks(context.Background()) }()
	l.expect(t, 2)
	select {
	case err := <-flushed:
		t.Fatalf("FlushAcks returned (%v) while a read carried a batch", err)
	case <-time.After(20 * time.Millisecond): // bounds a check that Flush waits
	}
	a.Done(riding, nil)
	select {
	case err := <-flushed:
		if err == nil || err.Error() != "connection reset" {
			t.Fatalf("FlushAcks = %v; want the send's failure", err)
		}
	case <-time.After(wait):
		t.Fatalf("FlushAcks did not return within %v of the read's batch coming back", wait)
	}

	ctx, cancel := context.WithCancel(context.Background())
	_ = a.SendAcks(ctx0, []int{3})
	stuck := a.Take()
	cancel()
	if err := a.FlushAcks(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("FlushAcks with a batch out and ctx done = %v; want context.Canceled", err)
	}
	a.Done(stuck, nil)

	w := kit.NewRidingAcks(l.send, l.report, time.Millisecond)
	defer w.Stop()
	_ = w.SendAcks(ctx0, []int{4})
	l.expect(t, 4)
	select {
	case err := <-l.reported:
		if err == nil {
			t.Fatal("reported a nil error")
		}
	case <-time.After(wait):
		t.Fatalf("the writer's failure was not reported within %v", wait)
	}
}
