package tck_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// fakeSender confirms every message except those whose id is in refuse.
type fakeSender struct {
	mu     sync.Mutex
	refuse map[string]bool
	sent   []string
}

func (s *fakeSender) Send(_ context.Context, msgs ...ports.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i, m := range msgs {
		s.sent = append(s.sent, m.ID())
		if s.refuse[m.ID()] {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: ports.ErrUnconfirmed})
		}
	}
	return errors.Join(errs...)
}

func msgs(n int) []ports.Message {
	out := make([]ports.Message, n)
	for i := range out {
		out[i] = ports.Message{Topic: "t", Payload: []byte("{}")}
	}
	return out
}

// delivery makes a delivery of the message sent as m.
func delivery(m ports.Message, redeliveries int, pos string) *ports.Delivery {
	return &ports.Delivery{Message: m, ID: m.ID(), RedeliveryCount: redeliveries, Facts: ports.NewFacts(ports.FactMap{"pos": pos})}
}

func received(l *tck.Ledger, d *ports.Delivery) { l.Observe(flow.Event{Delivery: d, Received: true}) }

func settled(l *tck.Ledger, d *ports.Delivery, a ports.Action) {
	l.Observe(flow.Event{Delivery: d, Action: a, Outcome: flow.Outcome{Kind: flow.Succeeded}})
}

// recorder is a testing.TB that records instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errs   []string
	logged []string
}

func (r *recorder) Helper() {}
func (r *recorder) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logged = append(r.logged, fmt.Sprint(args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestLedgerCountsLossAndSettlement(t *testing.T) {
	l := tck.NewLedger("fake", "unit")
	s := &fakeSender{}
	ms := msgs(4)
	if err := l.Send(context.Background(), s, ms...); err != nil {
		t.Fatal(err)
	}
	d0, d1, d2 := delivery(ms[0], 0, "a"), delivery(ms[1], 0, "b"), delivery(ms[2], 0, "c")
	for _, d := range []*ports.Delivery{d0, d1, d2} {
		received(l, d)
	}
	settled(l, d0, ports.Ack)
	settled(l, d1, ports.DeadLetter)
	settled(l, d2, ports.Requeue)
	d2b := delivery(ms[2], 1, "c")
	received(l, d2b)
	settled(l, d2b, ports.Ack)

	rec := &recorder{TB: t}
	r := l.Check(rec)
	if r.Confirmed != 4 || r.Acked != 2 || r.DeadLettered != 1 || r.Requeued != 1 || r.Lost != 1 || r.Duplicates != 0 {
		t.Fatalf("report %+v", r)
	}
	if r.LostSample[0] != ms[3].ID() {
		t.Fatalf("lost sample %v, want %s", r.LostSample, ms[3].ID())
	}
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "LOST") {
		t.Fatalf("Check errors %q, want one naming the loss", rec.errs)
	}
	if len(rec.logged) != 1 || !strings.HasPrefix(rec.logged[0], "LEDGER fake unit published=4 acked=2 dead=1 lost=1 dup=0 ") {
		t.Fatalf("LEDGER line %q", rec.logged)
	}
}

func TestLedgerUnconfirmedSendsAreNotLost(t *testing.T) {
	l := tck.NewLedger("fake", "unit")
	ms := msgs(3)
	for i := range ms {
		ms[i].Headers = ports.NewHeaders(ports.HeaderID, l.NewID())
	}
	s := &fakeSender{refuse: map[string]bool{ms[1].ID(): true}}
	err := l.Send(context.Background(), s, ms...)
	if !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send: %v", err)
	}
	// The refused one was stored after all and is delivered.
	for _, m := range ms {
		d := delivery(m, 0, "")
		received(l, d)
		settled(l, d, ports.Ack)
	}
	r := l.Report()
	if r.Confirmed != 2 || r.Attempted != 3 || r.Unconfirmed != 1 || r.UnconfirmedDelivered != 1 || r.Lost != 0 {
		t.Fatalf("report %+v", r)
	}
}

func TestUnconfirmedIndexes(t *testing.T) {
	se := func(i int) error { return &ports.SendError{Index: i, Err: ports.ErrUnconfirmed} }
	cases := []struct {
		err  error
		want []int
	}{
		{nil, nil},
		{se(1), []int{1}},
		{errors.Join(se(0), se(2)), []int{0, 2}},
		{fmt.Errorf("wrapped: %w", errors.Join(se(2))), []int{2}},
		{errors.New("connection refused"), []int{0, 1, 2}},
		{errors.Join(se(0), errors.New("other")), []int{0, 1, 2}},
		{se(7), []int{0, 1, 2}}, // an index out of range proves nothing
	}
	for _, c := range cases {
		got := tck.UnconfirmedIndexes(c.err, 3)
		if len(got) != len(c.want) {
			t.Errorf("%v: got %v, want %v", c.err, got, c.want)
			continue
		}
		for _, i := range c.want {
			if !got[i] {
				t.Errorf("%v: got %v, want %v", c.err, got, c.want)
			}
		}
	}
}

func TestLedgerDuplicateWindows(t *testing.T) {
	l := tck.NewLedger("fake", "windows")
	l.SetPosition(func(d *ports.Delivery) string { return d.Facts.Get("pos") })
	ms := msgs(6)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	// 0: redelivered while its first delivery is still open (in-flight).
	a, b := delivery(ms[0], 0, "p0"), delivery(ms[0], 0, "p0")
	received(l, a)
	received(l, b)
	settled(l, b, ports.Ack)
	settled(l, a, ports.Ack)
	// 1: cancelled by stop, then redelivered (unsettled).
	a = delivery(ms[1], 0, "p1")
	received(l, a)
	l.Observe(flow.Event{Delivery: a, Outcome: flow.Outcome{Kind: flow.Cancelled}})
	b = delivery(ms[1], 1, "p1")
	received(l, b)
	settled(l, b, ports.Ack)
	// 2: ack failed, then redelivered (settle-failed).
	a = delivery(ms[2], 0, "p2")
	received(l, a)
	l.Observe(flow.Event{Delivery: a, Outcome: flow.Outcome{Kind: flow.Succeeded}, Err: errors.New("ack lost")})
	b = delivery(ms[2], 1, "p2")
	received(l, b)
	settled(l, b, ports.Ack)
	// 3: acked, then the same position again (after-settle).
	a = delivery(ms[3], 0, "p3")
	received(l, a)
	settled(l, a, ports.Ack)
	b = delivery(ms[3], 0, "p3")
	received(l, b)
	settled(l, b, ports.Ack)
	// 4: acked, then another position (stored-twice).
	a = delivery(ms[4], 0, "p4")
	received(l, a)
	settled(l, a, ports.Ack)
	b = delivery(ms[4], 0, "p4-copy")
	received(l, b)
	settled(l, b, ports.Ack)
	// 5: sent twice, both copies delivered (publish-retry).
	if err := l.Send(context.Background(), &fakeSender{}, ms[5]); err != nil {
		t.Fatal(err)
	}
	for _, pos := range []string{"p5", "p5-copy"} {
		d := delivery(ms[5], 0, pos)
		received(l, d)
		settled(l, d, ports.Ack)
	}

	r := l.Report()
	want := map[tck.Window]int{
		tck.WindowInFlight: 1, tck.WindowUnsettled: 1, tck.WindowSettleFailed: 1,
		tck.WindowAfterSettle: 1, tck.WindowStoredTwice: 1, tck.WindowPublishRetry: 1,
	}
	for w, n := range want {
		if r.Windows[w].Count != n {
			t.Errorf("window %s: %d, want %d (report %+v)", w, r.Windows[w].Count, n, r.Windows)
		}
	}
	if r.Duplicates != 6 || r.Lost != 0 || r.RepeatedEffects != 4 || r.SettleFailed != 1 {
		t.Fatalf("report %+v", r)
	}
	if r.PeakInFlight != 2 || r.InFlight != 0 {
		t.Fatalf("peak in flight %d, in flight %d; want 2 and 0", r.PeakInFlight, r.InFlight)
	}
	if line := r.Line(); !strings.Contains(line, "windows=after-settle:1@") || !strings.Contains(line, "dup=6") {
		t.Fatalf("line %q", line)
	}
}

func TestLedgerPhantomFailsCheck(t *testing.T) {
	l := tck.NewLedger("fake", "phantom")
	received(l, &ports.Delivery{ID: "never-sent"})
	rec := &recorder{TB: t}
	r := l.Check(rec)
	if r.Phantoms != 1 || len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "never-sent") {
		t.Fatalf("phantoms %d, errors %q", r.Phantoms, rec.errs)
	}
}

func TestLedgerExternalProcessAndRecovery(t *testing.T) {
	l := tck.NewLedger("fake", "external")
	before := msgs(1)
	if err := l.Send(context.Background(), &fakeSender{}, before...); err != nil {
		t.Fatal(err)
	}
	l.Delivered(before[0].ID(), "x")
	if c := l.Counts(); c.InFlight != 1 {
		t.Fatalf("in flight %d, want 1", c.InFlight)
	}
	l.Died(before[0].ID())
	l.Mark("kill")
	after := msgs(1)
	if err := l.Send(context.Background(), &fakeSender{}, after...); err != nil {
		t.Fatal(err)
	}
	// The old message acked first does not end the recovery: it was sent
	// before the mark.
	d := delivery(before[0], 0, "x")
	received(l, d)
	settled(l, d, ports.Ack)
	if r := l.Report(); r.Recoveries[0].Recovered {
		t.Fatalf("recovered by a message sent before the mark: %+v", r.Recoveries)
	}
	l.Delivered(after[0].ID(), "")
	l.Settled(after[0].ID(), ports.Ack)
	r := l.Report()
	if !r.Recoveries[0].Recovered || r.Windows[tck.WindowInFlight].Count != 1 || r.InFlight != 0 || r.Lost != 0 {
		t.Fatalf("report %+v", r)
	}
}

func TestLedgerAwait(t *testing.T) {
	l := tck.NewLedger("fake", "await")
	ms := msgs(2)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- l.AwaitSettled(ctx)
	}()
	for _, m := range ms {
		d := delivery(m, 0, "")
		received(l, d)
		settled(l, d, ports.Ack)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := l.Await(ctx, "the impossible", func(c tck.Counts) bool { return c.Acked > 2 })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "the impossible") {
		t.Fatalf("Await on a cancelled context: %v", err)
	}
}

func TestLedgerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.txt")
	t.Setenv(tck.LedgerFileEnv, path)
	l := tck.NewLedger("fake", "file")
	l.Check(t)
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(b), "LEDGER fake file published=0 acked=0 dead=0 lost=0 dup=0") {
		t.Fatalf("ledger file %q, %v", b, err)
	}
}

// TestLedgerOverMem runs the ledger against a real pipeline: every message
// sent is acked or dead-lettered and the ledger agrees with the pipeline's
// own stats.
func TestLedgerOverMem(t *testing.T) {
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close(context.Background()) }()
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := tck.NewLedger("mem", "none")
	spec := ports.SubscriptionSpec{Topic: "ledger", Group: "g", InFlight: 8, Retry: ports.RetryPolicy{MaxAttempts: 3, NoBackoff: true}}
	p := flow.New(a, spec, l.Observer(), flow.WithErrorHandler(func(error) {}))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		switch {
		case strings.HasSuffix(d.ID, "0"):
			return ports.Poisonf("bad")
		case strings.HasSuffix(d.ID, "1") && d.RedeliveryCount == 0:
			return errors.New("transient")
		}
		return nil
	}, flow.Workers(4))
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 200
	if err := l.Send(ctx, a, msgsTo("ledger", n)...); err != nil {
		t.Fatal(err)
	}
	if err := l.AwaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	r := l.Check(t)
	s := p.Stats()
	if r.Acked+r.DeadLettered != n || int64(r.Acked) != s.Acked || int64(r.DeadLettered) != s.DeadLettered ||
		int64(r.Requeued) != s.Requeued || int64(r.Delivered) != s.Received || r.Duplicates != 0 || r.PeakInFlight > spec.InFlight {
		t.Fatalf("ledger %+v disagrees with pipeline stats %+v", r, s)
	}
}

func msgsTo(topic ports.Topic, n int) []ports.Message {
	out := msgs(n)
	for i := range out {
		out[i].Topic = topic
	}
	return out
}

// A requeue copy that arrives before the requeue's own settlement (Kafka
// republishes the copy, then commits the original) is the requeue, not a
// duplicate; a higher count followed by another outcome is one.
func TestLedgerRequeueCopyOvertakingItsSettlement(t *testing.T) {
	l := tck.NewLedger("fake", "overtake")
	ms := msgs(2)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	first, copy := delivery(ms[0], 0, "o1"), delivery(ms[0], 1, "o2")
	received(l, first)
	received(l, copy)
	settled(l, copy, ports.Ack) // the copy is done before the requeue returns
	settled(l, first, ports.Requeue)
	if r := l.Report(); r.Duplicates != 0 || r.Requeued != 1 || r.Acked != 1 || r.InFlight != 0 {
		t.Fatalf("requeue copy overtaking its settlement: %+v", r)
	}
	first, other := delivery(ms[1], 0, "p1"), delivery(ms[1], 1, "p2")
	received(l, first)
	received(l, other)
	settled(l, first, ports.Ack)
	settled(l, other, ports.Ack)
	if r := l.Report(); r.Duplicates != 1 || r.Windows[tck.WindowInFlight].Count != 1 {
		t.Fatalf("a higher count then an ack: %+v", r)
	}
}

// A settlement that failed in doubt (ports.ErrSettleInDoubt: the broker's
// answer was lost) is not a loss when the broker never redelivers the
// message: it applied the settlement. A plain failure still is.
func TestLedgerSettleInDoubtIsNotLost(t *testing.T) {
	l := tck.NewLedger("fake", "unit")
	ms := msgs(2)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	d0, d1 := delivery(ms[0], 0, "a"), delivery(ms[1], 0, "b")
	received(l, d0)
	received(l, d1)
	l.Observe(flow.Event{Delivery: d0, Err: fmt.Errorf("ack: %w: connection closed", ports.ErrSettleInDoubt)})
	l.Observe(flow.Event{Delivery: d1, Err: errors.New("ack: connection closed")})
	if c := l.Counts(); c.InDoubt != 1 {
		t.Fatalf("counts %+v: want InDoubt=1", c)
	}
	rec := &recorder{TB: t}
	r := l.Check(rec)
	if r.Lost != 1 || r.InDoubt != 1 || r.LostAfterSettleError != 1 || r.LostSample[0] != ms[1].ID() {
		t.Fatalf("report %+v: want the in-doubt message not lost, the plain failure lost", r)
	}
	if len(rec.logged) != 1 || !strings.Contains(rec.logged[0], " settle-in-doubt=1") {
		t.Fatalf("LEDGER line %q, want settle-in-doubt=1", rec.logged)
	}
	// Redelivered and acked after all: no longer in doubt.
	received(l, delivery(ms[0], 1, "a"))
	l.Observe(flow.Event{Delivery: delivery(ms[0], 1, "a"), Action: ports.Ack})
	if c := l.Counts(); c.InDoubt != 0 || c.Settled != 1 {
		t.Fatalf("counts %+v after the redelivery was acked: want InDoubt=0 Settled=1", c)
	}
}
