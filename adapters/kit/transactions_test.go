package kit_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
)

// txnLog is a broker with transactions: a committed round's messages and
// positions; refuse makes it abort the next one.
type txnLog struct {
	mu        sync.Mutex
	published []string
	pos       map[string]int64
	refuse    error
	reported  []error
}

func (l *txnLog) commit(moved []kit.Position[string], msgs []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.refuse; err != nil {
		l.refuse = nil
		return err
	}
	l.published = append(l.published, msgs...)
	for _, m := range moved {
		l.pos[m.ID] = m.Offset
	}
	return nil
}

func (l *txnLog) state() ([]string, map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.published), l.pos
}

func newTransactions(t *testing.T) (*kit.Transactions[string, string], *txnLog) {
	l := &txnLog{pos: map[string]int64{}}
	tx := kit.NewTransactions(kit.PartitionsOptions[string]{Interval: time.Hour, Threshold: 1 << 30, Retry: time.Millisecond},
		l.commit, func(err error) { l.reported = append(l.reported, err) })
	t.Cleanup(tx.Close)
	return tx, l
}

// claimed claims partition t/0 with n records, and takes them.
func claimed(tx *kit.Transactions[string, string], n int64) (*kit.Partition[string], []driver.Record) {
	p := tx.Claim("t/0", 0, 0)
	for off := range n {
		tx.Add(p, off, rec(""), false)
	}
	return p, take(tx.Partitions)
}

// TestTransactionsCommitStagedBelowThePosition: a round publishes the
// messages staged for the records below each moved position, oldest
// first, and keeps those of records still out for a later round; a
// discarded record's messages are never published.
func TestTransactionsCommitStagedBelowThePosition(t *testing.T) {
	tx, l := newTransactions(t)
	p, rs := claimed(tx, 4)
	for i, msgs := range [][]string{{"a"}, {"b1", "b2"}, {"c"}, {"d"}} {
		if err := tx.Stage(rs[i].Handle, msgs); err != nil {
			t.Fatal(err)
		}
	}
	tx.Discard(handles(rs[3]))
	if err := tx.Ack(handles(rs[2], rs[0])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, pos := l.state(); !slices.Equal(pub, []string{"a"}) || pos["t/0"] != 1 {
		t.Fatalf("published %v at %d, want [a] at 1 (offset 1 still out)", pub, pos["t/0"])
	}
	if err := tx.Ack(handles(rs[1], rs[3])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, pos := l.state(); !slices.Equal(pub, []string{"a", "b1", "b2", "c"}) || pos["t/0"] != 4 {
		t.Fatalf("published %v at %d, want a b1 b2 c at 4", pub, pos["t/0"])
	}
	tx.Release(p)
	if err := tx.Stage(rs[0].Handle, []string{"late"}); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("stage on a released partition: %v, want ErrRecordsLost", err)
	}
}

// TestTransactionsStageCopies: Stage does not keep the caller's slice (a
// driver stages from a buffer it reuses), and the copies of consecutive
// records, which share an allocation, stay apart when one grows.
func TestTransactionsStageCopies(t *testing.T) {
	tx, l := newTransactions(t)
	_, rs := claimed(tx, 3)
	buf := make([]string, 1)
	for i, m := range []string{"a", "b", "c"} {
		buf[0] = m
		if err := tx.Stage(rs[i].Handle, buf); err != nil {
			t.Fatal(err)
		}
	}
	buf[0] = "overwritten"
	if err := tx.Stage(rs[0].Handle, []string{"a2"}); err != nil { // a's copy grows
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs...)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, _ := l.state(); !slices.Equal(pub, []string{"a", "a2", "b", "c"}) {
		t.Fatalf("published %v, want a a2 b c", pub)
	}
}

// TestTransactionsFailureEndsTheSession: an aborted transaction is
// reported, closes Ending, refuses acknowledgements and stages, and is
// returned by Flush once the session ended; after Renew the next
// session's records commit, and nothing of the failed one is published.
func TestTransactionsFailureEndsTheSession(t *testing.T) {
	tx, l := newTransactions(t)
	aborted := errors.New("aborted")
	l.refuse = aborted
	_, rs := claimed(tx, 1)
	if err := tx.Stage(rs[0].Handle, []string{"lost"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	go func() { // the driver ends the session
		<-tx.Ending()
		tx.ReleaseAll()
	}()
	if err := tx.Flush(t.Context()); !errors.Is(err, driver.ErrRecordsLost) || !errors.Is(err, aborted) {
		t.Fatalf("Flush = %v, want the abort wrapping ErrRecordsLost", err)
	}
	if len(l.reported) != 1 || !errors.Is(l.reported[0], aborted) {
		t.Fatalf("reported %v, want the abort once", l.reported)
	}
	if err := tx.Ack(nil); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("ack after the failure: %v, want ErrRecordsLost", err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatalf("second Flush = %v, want nil (the failure is returned once)", err)
	}
	tx.Renew()
	select {
	case <-tx.Ending():
		t.Fatal("Ending still closed after Renew")
	default:
	}
	q := tx.Claim("t/0", 0, 0)
	tx.Add(q, 0, rec(""), false)
	rs = take(tx.Partitions)
	if err := tx.Stage(rs[0].Handle, []string{"again"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, pos := l.state(); !slices.Equal(pub, []string{"again"}) || pos["t/0"] != 1 {
		t.Fatalf("published %v at %d, want [again] at 1", pub, pos["t/0"])
	}
}

// TestTransactionsNil: a nil Transactions (a subscription without
// transactions) never ends a session, renews and discards nothing.
func TestTransactionsNil(t *testing.T) {
	var tx *kit.Transactions[string, string]
	tx.Renew()
	tx.Discard([]any{1})
	if tx.Ending() != nil {
		t.Fatal("a nil Transactions has an Ending channel")
	}
}

// TestTransactionsCommitInStagingOrder: a round publishes in the order the
// records were first staged, not by offset nor by partition, with a
// record's messages together (one staged twice keeps its place); a
// record still out keeps its place for a later round, before records
// staged after it.
func TestTransactionsCommitInStagingOrder(t *testing.T) {
	tx, l := newTransactions(t)
	p0, p1 := tx.Claim("t/0", 0, 0), tx.Claim("t/1", 0, 0)
	for off := range int64(4) {
		tx.Add(p0, off, rec(""), false)
	}
	tx.Add(p1, 0, rec(""), false)
	rs := take(tx.Partitions) // t/0 at 0..3, then t/1 at 0
	for _, s := range []struct {
		i   int
		msg string
	}{{2, "c"}, {4, "x"}, {0, "a"}, {1, "b"}, {0, "a2"}} {
		if err := tx.Stage(rs[s.i].Handle, []string{s.msg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Ack(handles(rs[0], rs[2], rs[4])); err != nil { // t/0's offset 1 still out
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, _ := l.state(); !slices.Equal(pub, []string{"x", "a", "a2"}) {
		t.Fatalf("published %v, want x a a2 (c waits behind offset 1)", pub)
	}
	for _, s := range []struct {
		i   int
		msg string
	}{{3, "d"}, {1, "b2"}} { // b's messages together still
		if err := tx.Stage(rs[s.i].Handle, []string{s.msg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Ack(handles(rs[3], rs[1])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, pos := l.state(); !slices.Equal(pub, []string{"x", "a", "a2", "c", "b", "b2", "d"}) || pos["t/0"] != 4 {
		t.Fatalf("published %v at %d, want x a a2 c b b2 d at 4", pub, pos["t/0"])
	}
}

// TestTransactionsDropStagedOfReleasedPartition: what was staged for a
// released partition is never published, not even once a partition of the
// same id is claimed again and its position passes the old records'.
func TestTransactionsDropStagedOfReleasedPartition(t *testing.T) {
	tx, l := newTransactions(t)
	p0, p1 := tx.Claim("t/0", 0, 0), tx.Claim("t/1", 0, 0)
	tx.Add(p0, 0, rec(""), false)
	tx.Add(p1, 0, rec(""), false)
	rs := take(tx.Partitions)
	if err := tx.Stage(rs[0].Handle, []string{"kept"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Stage(rs[1].Handle, []string{"gone"}); err != nil {
		t.Fatal(err)
	}
	tx.Release(p1)
	again := tx.Claim("t/1", 0, 0)
	tx.Add(again, 0, rec(""), false)
	tx.Add(again, 1, rec(""), false)
	next := take(tx.Partitions)
	if err := tx.Stage(next[1].Handle, []string{"new"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs[0], next[0], next[1])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, pos := l.state(); !slices.Equal(pub, []string{"kept", "new"}) || pos["t/1"] != 2 {
		t.Fatalf("published %v with t/1 at %d, want kept new at 2", pub, pos["t/1"])
	}
}

// TestTransactionsDiscardThenStageAgain: a discarded record's messages
// are dropped, and staged again (its redelivery) they take the place of
// its new Stage; discarding a record with nothing staged does nothing.
func TestTransactionsDiscardThenStageAgain(t *testing.T) {
	tx, l := newTransactions(t)
	_, rs := claimed(tx, 3)
	for i, m := range []string{"first", "b"} {
		if err := tx.Stage(rs[i].Handle, []string{m}); err != nil {
			t.Fatal(err)
		}
	}
	tx.Discard(handles(rs[0], rs[2]))
	if err := tx.Stage(rs[0].Handle, []string{"again"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs...)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub, _ := l.state(); !slices.Equal(pub, []string{"b", "again"}) {
		t.Fatalf("published %v, want b again", pub)
	}
}

// TestTransactionsConcurrentStaging: stagers acknowledging while rounds
// run (a threshold of a few records) have each acknowledged record's
// messages published once, a discarded and restaged record's new ones
// only, and each stager's in the order it staged them.
func TestTransactionsConcurrentStaging(t *testing.T) {
	l := &txnLog{pos: map[string]int64{}}
	tx := kit.NewTransactions(kit.PartitionsOptions[string]{Interval: time.Millisecond, Threshold: 7, Retry: time.Millisecond}, l.commit, nil)
	t.Cleanup(tx.Close)
	const n, stagers = 2000, 4
	p := tx.Claim("t/0", 0, 0)
	for off := range int64(n) {
		tx.Add(p, off, rec(""), false)
	}
	rs := tx.Take(nil, n)
	var wg sync.WaitGroup
	for w := range stagers {
		wg.Go(func() {
			for i := w; i < n; i += stagers {
				h := rs[i].Handle
				if err := tx.Stage(h, []string{"m" + strconv.Itoa(i)}); err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 { // requeued and delivered again
					tx.Discard([]any{h})
					if err := tx.Stage(h, []string{"r" + strconv.Itoa(i)}); err != nil {
						t.Error(err)
						return
					}
				}
				if err := tx.Ack([]any{h}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	pub, pos := l.state()
	if pos["t/0"] != n || len(pub) != n {
		t.Fatalf("published %d messages at %d, want %d at %d", len(pub), pos["t/0"], n, n)
	}
	last := make([]int, stagers) // each stager's last record published
	for w := range last {
		last[w] = w - stagers
	}
	for _, m := range pub {
		i, err := strconv.Atoi(m[1:])
		if err != nil {
			t.Fatalf("published %q", m)
		}
		if want := "m"; i%5 == 0 {
			want = "r"
			if m[:1] != want {
				t.Fatalf("published %s, discarded", m)
			}
		} else if m[:1] != want {
			t.Fatalf("published %s, never staged", m)
		}
		if w := i % stagers; i != last[w]+stagers {
			t.Fatalf("published %s after record %d of the same stager, want record %d", m, last[w], last[w]+stagers)
		} else {
			last[w] = i
		}
	}
}

// TestTransactionsStageWhilePublishing: what is staged while a transaction
// runs waits for a later one, what is discarded meanwhile is never
// published, and the messages a transaction published are not published
// again.
func TestTransactionsStageWhilePublishing(t *testing.T) {
	var published [][]string
	entered, release := make(chan struct{}), make(chan struct{})
	tx := kit.NewTransactions(kit.PartitionsOptions[string]{Interval: time.Hour, Threshold: 1 << 30, Retry: time.Millisecond},
		func(_ []kit.Position[string], msgs []string) error {
			if published == nil {
				entered <- struct{}{}
				<-release
			}
			published = append(published, slices.Clone(msgs))
			return nil
		}, nil)
	t.Cleanup(tx.Close)
	_, rs := claimed(tx, 4)
	for i, m := range []string{"a", "b"} {
		if err := tx.Stage(rs[i].Handle, []string{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error)
	go func() { flushed <- tx.Flush(t.Context()) }()
	<-entered // the round publishes a
	tx.Discard(handles(rs[1]))
	for i, m := range []string{"c", "d"} {
		if err := tx.Stage(rs[i+2].Handle, []string{m}); err != nil {
			t.Fatal(err)
		}
	}
	tx.Discard(handles(rs[2]))
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(handles(rs[1], rs[2], rs[3])); err != nil {
		t.Fatal(err)
	}
	if err := tx.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"a"}, {"d"}}; !slices.EqualFunc(published, want, slices.Equal) {
		t.Fatalf("published %v, want %v", published, want)
	}
}
