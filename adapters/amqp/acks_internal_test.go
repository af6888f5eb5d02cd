package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// brokerAcks models RabbitMQ's view of one channel's unacked deliveries:
// an ack of an unknown tag (single or multiple) is a channel error.
type brokerAcks struct {
	unacked map[uint64]bool
	frames  int
	multi   int
}

func (b *brokerAcks) ack(tag uint64, multiple bool) error {
	if !b.unacked[tag] {
		return fmt.Errorf("PRECONDITION_FAILED - unknown delivery tag %d (multiple=%v)", tag, multiple)
	}
	b.frames++
	if !multiple {
		delete(b.unacked, tag)
		return nil
	}
	b.multi++
	for t := range b.unacked {
		if t <= tag {
			delete(b.unacked, t)
		}
	}
	return nil
}

// TestAckerNeverAcksOutstandingOrUnknownTags settles random groups of
// delivered tags in random order, flushing at random points, against a
// model of the broker: no frame may name an unknown tag, no multiple-ack
// may cover a tag that was not settled, and every settled tag ends acked.
func TestAckerNeverAcksOutstandingOrUnknownTags(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		b := &brokerAcks{unacked: map[uint64]bool{}}
		a := newAcker(b.ack, 8)
		var next uint64 = 1
		var held []uint64 // received, not settled
		settled := map[uint64]bool{}
		for step := 0; step < 200; step++ {
			switch rng.IntN(3) {
			case 0: // the broker delivers a few, Receive registers them
				n := 1 + rng.IntN(5)
				var tags []uint64
				for range n {
					b.unacked[next] = true
					tags = append(tags, next)
					held = append(held, next)
					next++
				}
				a.received(tags...)
			case 1: // settle a random group
				if len(held) == 0 {
					continue
				}
				rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				k := 1 + rng.IntN(min(len(held), 6))
				group := append([]uint64(nil), held[:k]...)
				held = held[k:]
				if err := a.settle(group...); err != nil {
					t.Fatalf("seed %d: settle: %v", seed, err)
				}
				for _, tg := range group {
					settled[tg] = true
				}
			case 2:
				a.flush(nil)
				if a.err != nil {
					t.Fatalf("seed %d: %v", seed, a.err)
				}
			}
			for _, h := range held {
				if !b.unacked[h] {
					t.Fatalf("seed %d: outstanding tag %d was acked", seed, h)
				}
			}
		}
		a.flush(nil)
		if a.err != nil {
			t.Fatalf("seed %d: %v", seed, a.err)
		}
		for tg := range settled {
			if b.unacked[tg] {
				t.Fatalf("seed %d: settled tag %d never acked", seed, tg)
			}
		}
		if len(b.unacked) != len(held) {
			t.Fatalf("seed %d: %d unacked at the broker, %d held", seed, len(b.unacked), len(held))
		}
	}
}

// TestAckerCoalescesABatch shows the batch path: a contiguous batch below
// every outstanding delivery is one multiple-ack frame.
func TestAckerCoalescesABatch(t *testing.T) {
	b := &brokerAcks{unacked: map[uint64]bool{}}
	a := newAcker(b.ack, 16)
	for tg := uint64(1); tg <= 10; tg++ {
		b.unacked[tg] = true
		a.received(tg)
	}
	for tg := uint64(1); tg <= 5; tg++ { // one Settle per member, as the core does
		if err := a.settle(tg); err != nil {
			t.Fatal(err)
		}
	}
	a.flush(nil)
	if b.frames != 1 || b.multi != 1 || len(b.unacked) != 5 {
		t.Fatalf("%d frames (%d multiple), %d unacked; want 1 multiple-ack and tags 6..10 unacked", b.frames, b.multi, len(b.unacked))
	}
	// 7 and 9 complete before 6: they must be acked singly.
	if err := a.settle(9, 7); err != nil {
		t.Fatal(err)
	}
	a.flush(nil)
	if b.frames != 3 || !b.unacked[6] || !b.unacked[8] || !b.unacked[10] {
		t.Fatalf("after settling 7 and 9: %d frames, unacked %v", b.frames, b.unacked)
	}
}

// TestAckerStopsWritingAfterAFailure reports lost acks once the channel
// failed a write.
func TestAckerStopsWritingAfterAFailure(t *testing.T) {
	fail := fmt.Errorf("channel closed")
	a := newAcker(func(uint64, bool) error { return fail }, 4)
	a.received(1, 2, 3)
	if err := a.settle(1, 2); err != nil {
		t.Fatal(err)
	}
	go a.run()
	lost := a.stop()
	if lost != 2 {
		t.Fatalf("lost %d acks, want 2", lost)
	}
	if err := a.settle(3); err == nil {
		t.Fatal("settle after a failed write returned nil")
	}
}

// TestAckerWaitReturnsWhenSettledAcksAreWritten: Flush's wait returns only
// after the writer wrote every ack settled before the call.
func TestAckerWaitReturnsWhenSettledAcksAreWritten(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	written := 0
	a := newAcker(func(uint64, bool) error {
		<-release
		mu.Lock()
		written++
		mu.Unlock()
		return nil
	}, 8)
	go a.run()
	defer a.stop()
	a.received(1, 2, 3)
	if err := a.settle(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.wait(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v before the ack was written", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return within 5s of the write")
	}
	mu.Lock()
	defer mu.Unlock()
	if written != 1 {
		t.Fatalf("%d ack frames, want one multiple-ack", written)
	}
}

func TestAckerWaitReportsAWriteError(t *testing.T) {
	a := newAcker(func(uint64, bool) error { return errors.New("channel closed") }, 8)
	go a.run()
	defer a.stop()
	a.received(1)
	_ = a.settle(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("wait = %v, want the write error within 5s", err)
	}
}

// lockedBroker is brokerAcks for an acker whose writer runs on its own
// goroutine, with the broker's prefetch window: it delivers while fewer
// than prefetch are unacked.
type lockedBroker struct {
	mu       sync.Mutex
	b        brokerAcks
	acked    chan struct{} // signalled after every frame
	next     uint64
	prefetch int
}

func (l *lockedBroker) ack(tag uint64, multiple bool) error {
	l.mu.Lock()
	err := l.b.ack(tag, multiple)
	l.mu.Unlock()
	select {
	case l.acked <- struct{}{}:
	default:
	}
	return err
}

// deliver returns the tags the broker delivers now (up to n in all).
func (l *lockedBroker) deliver(n uint64) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var tags []uint64
	for len(l.b.unacked) < l.prefetch && l.next < n {
		l.next++
		l.b.unacked[l.next] = true
		tags = append(tags, l.next)
	}
	return tags
}

// TestAckerWritesOneFrameForHalfThePrefetch consumes 3,000 deliveries at
// prefetch 100, settling one at a time in order as the default pipeline
// does, with the linger out of the way: the writer writes one
// multiple-ack per 50 settled (what the raw client's best configuration
// writes), and the broker never stalls for want of an ack.
func TestAckerWritesOneFrameForHalfThePrefetch(t *testing.T) {
	const n, prefetch = 3000, 100
	l := &lockedBroker{b: brokerAcks{unacked: map[uint64]bool{}}, acked: make(chan struct{}, 1), prefetch: prefetch}
	a := newAcker(l.ack, prefetch)
	a.linger = time.Hour
	go a.run()
	var held []uint64
	for settled := 0; settled < n; {
		if tags := l.deliver(n); len(tags) > 0 {
			a.received(tags...)
			held = append(held, tags...)
		}
		if len(held) == 0 {
			select {
			case <-l.acked:
				continue
			case <-time.After(5 * time.Second):
				t.Fatalf("stalled after %d settled: nothing delivered and no ack written for 5s (threshold %d, prefetch %d)", settled, a.threshold, prefetch)
			}
		}
		if err := a.settle(held[0]); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
		settled++
	}
	if lost := a.stop(); lost != 0 {
		t.Fatalf("%d acks lost", lost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b.unacked) != 0 {
		t.Fatalf("%d deliveries never acked", len(l.b.unacked))
	}
	if max := n / (prefetch / 2); l.b.frames > max || l.b.frames != l.b.multi {
		t.Fatalf("%d ack frames (%d multiple) for %d deliveries; want at most %d, all multiple", l.b.frames, l.b.multi, n, max)
	}
	t.Logf("%d deliveries, %d ack frames", n, l.b.frames)
}

// TestAckerLingerWritesBelowTheThreshold: fewer settled than the
// threshold are written once the linger passes, without a Flush.
func TestAckerLingerWritesBelowTheThreshold(t *testing.T) {
	l := &lockedBroker{b: brokerAcks{unacked: map[uint64]bool{}}, acked: make(chan struct{}, 1), prefetch: 100}
	a := newAcker(l.ack, 100)
	go a.run()
	defer a.stop()
	a.received(l.deliver(3)...)
	if err := a.settle(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.acked:
	case <-time.After(5 * time.Second):
		t.Fatalf("3 settled acks (threshold %d) not written within 5s; the linger is %v", a.threshold, a.linger)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.frames != 1 || len(l.b.unacked) != 0 {
		t.Fatalf("%d frames, %d unacked; want one multiple-ack of all 3", l.b.frames, len(l.b.unacked))
	}
}

// TestAckerWaitDoesNotWaitForTheLinger: Flush (wait) writes what is
// pending at once, below the threshold and before the linger.
func TestAckerWaitDoesNotWaitForTheLinger(t *testing.T) {
	l := &lockedBroker{b: brokerAcks{unacked: map[uint64]bool{}}, acked: make(chan struct{}, 1), prefetch: 100}
	a := newAcker(l.ack, 100)
	a.linger = time.Hour
	go a.run()
	defer a.stop()
	a.received(l.deliver(5)...)
	if err := a.settle(1, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.wait(ctx); err != nil {
		t.Fatalf("wait: %v (the linger is an hour: wait must not wait for it)", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.frames != 1 || len(l.b.unacked) != 3 {
		t.Fatalf("%d frames, %d unacked; want one multiple-ack of tags 1..2", l.b.frames, len(l.b.unacked))
	}
}

// TestAckerStopWritesWhatIsPending: stop writes pending acks below the
// threshold without waiting for the linger.
func TestAckerStopWritesWhatIsPending(t *testing.T) {
	l := &lockedBroker{b: brokerAcks{unacked: map[uint64]bool{}}, acked: make(chan struct{}, 1), prefetch: 100}
	a := newAcker(l.ack, 100)
	a.linger = time.Hour
	go a.run()
	a.received(l.deliver(4)...)
	if err := a.settle(1, 2, 3, 4); err != nil {
		t.Fatal(err)
	}
	if lost := a.stop(); lost != 0 {
		t.Fatalf("stop lost %d acks", lost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b.unacked) != 0 {
		t.Fatalf("%d unacked after stop", len(l.b.unacked))
	}
}
