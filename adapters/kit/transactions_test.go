package kit_test

import (
	"errors"
	"slices"
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
