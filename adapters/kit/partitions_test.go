package kit_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// commitLog is a broker that stores commit positions; refuse makes it
// refuse them.
type commitLog struct {
	mu     sync.Mutex
	pos    map[string]int64
	rounds int
	refuse error
}

func (c *commitLog) commit(moved []kit.Position[string]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds++
	if c.refuse != nil {
		return c.refuse
	}
	for i := range moved {
		c.pos[moved[i].ID] = moved[i].Offset
		moved[i].Stored = true
	}
	return nil
}

func (c *commitLog) at(id string) (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos, ok := c.pos[id]
	if !ok {
		pos = -1
	}
	return pos, c.rounds
}

// newPartitions returns Partitions whose commit loop never runs on its own
// (an hour's interval, a threshold no test reaches).
func newPartitions(t *testing.T) (*kit.Partitions[string], *commitLog) {
	c := &commitLog{pos: map[string]int64{}}
	ps := kit.NewPartitions(kit.PartitionsOptions[string]{Commit: c.commit, Interval: time.Hour, Threshold: 1 << 30, Retry: time.Millisecond})
	t.Cleanup(ps.Close)
	return ps, c
}

func rec(key string) driver.Record { return driver.Record{Message: ports.Message{Key: key}} }

func take(ps *kit.Partitions[string]) []driver.Record { return ps.Take(nil, 100) }

func handles(rs ...driver.Record) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		out[i] = r.Handle
	}
	return out
}

// TestPartitionsCommitTheDonePrefix: the start is committed at once;
// acknowledgements out of order move the position only over the done
// prefix; a skipped record counts as done.
func TestPartitionsCommitTheDonePrefix(t *testing.T) {
	ps, c := newPartitions(t)
	p := ps.Claim("t/0", 10, -1)
	if err := ps.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pos, _ := c.at("t/0"); pos != 10 {
		t.Fatalf("start not committed: %d, want 10", pos)
	}
	for off := int64(10); off < 14; off++ {
		ps.Add(p, off, rec(""), off == 12)
	}
	rs := take(ps)
	if len(rs) != 3 {
		t.Fatalf("took %d records, want 3 (offset 12 skipped)", len(rs))
	}
	if err := ps.Ack(handles(rs[2], rs[1])); err != nil { // 13, 11
		t.Fatal(err)
	}
	_ = ps.Flush(t.Context())
	if pos, _ := c.at("t/0"); pos != 10 {
		t.Fatalf("10 still out: committed %d, want 10", pos)
	}
	if err := ps.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	_ = ps.Flush(t.Context())
	if pos, _ := c.at("t/0"); pos != 14 {
		t.Fatalf("all done: committed %d, want 14", pos)
	}
	flushCallsNoCommit(t, ps, c, "a round without a moved position called Commit")
}

// TestPartitionsHoldKeys: one record per non-empty key is out at a time;
// the next one is ready when the first is acknowledged, and Wake says so.
func TestPartitionsHoldKeys(t *testing.T) {
	wake := make(chan struct{}, 1)
	ps := kit.NewPartitions(kit.PartitionsOptions[string]{Commit: func([]kit.Position[string]) error { return nil }, Wake: wake})
	defer ps.Close()
	p := ps.Claim("t/0", 0, -1)
	for off, key := range []string{"a", "a", "b", ""} {
		ps.Add(p, int64(off), rec(key), false)
	}
	if ps.Pending() != 4 {
		t.Fatalf("pending %d, want 4", ps.Pending())
	}
	rs := take(ps)
	if keys := []string{rs[0].Message.Key, rs[1].Message.Key, rs[2].Message.Key}; len(rs) != 3 || !slices.Equal(keys, []string{"a", "b", ""}) {
		t.Fatalf("took %d records (keys %v), want a, b and the keyless one", len(rs), keys)
	}
	if err := ps.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	default:
		t.Fatal("the second record of key a became ready without a wake")
	}
	if next := take(ps); len(next) != 1 || next[0].Message.Key != "a" || ps.Pending() != 0 {
		t.Fatalf("after the ack took %v, pending %d", next, ps.Pending())
	}
}

// TestPartitionsReleaseFences: Release commits what was done, drops what
// was not handed out, and afterwards nothing of the partition is
// committed or handed out; a late acknowledgement is ErrRecordsLost.
func TestPartitionsReleaseFences(t *testing.T) {
	ps, c := newPartitions(t)
	p := ps.Claim("t/0", 0, -1)
	q := ps.Claim("t/1", 0, 0)
	ps.Add(p, 0, rec("k"), false)
	ps.Add(p, 1, rec("k"), false) // waits behind offset 0
	ps.Add(p, 2, rec(""), false)
	ps.Add(q, 0, rec(""), false)
	rs := ps.Take(nil, 1) // offset 0 of p; 2 of p and 0 of q stay ready
	if err := ps.Ack(handles(rs[0])); err != nil {
		t.Fatal(err)
	}
	ps.Release(p)
	if pos, _ := c.at("t/0"); pos != 1 {
		t.Fatalf("release committed %d, want 1", pos)
	}
	left := take(ps)
	if len(left) != 1 || ps.Pending() != 0 {
		t.Fatalf("after the release %d records ready, %d pending; want q's only", len(left), ps.Pending())
	}
	ps.Add(p, 3, rec(""), false)
	if ps.Pending() != 0 {
		t.Fatal("a record of a released partition was added")
	}
	if err := ps.Ack(handles(rs[0])); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("late ack: %v, want ErrRecordsLost", err)
	}
	if err := ps.Ack(handles(left[0])); err != nil {
		t.Fatal(err)
	}
	ps.ReleaseAll()
	if pos, _ := c.at("t/1"); pos != 1 {
		t.Fatalf("ReleaseAll committed %d for t/1, want 1", pos)
	}
	flushCallsNoCommit(t, ps, c, "a released partition was committed")
}

// flushCallsNoCommit fails with why when a Flush calls Commit.
func flushCallsNoCommit(t *testing.T, ps *kit.Partitions[string], c *commitLog, why string) {
	t.Helper()
	_, rounds := c.at("")
	_ = ps.Flush(t.Context())
	if _, again := c.at(""); again != rounds {
		t.Fatal(why)
	}
}

// TestPartitionsFlushRetries: a refused commit is retried until ctx ends,
// and Flush returns the refusal with the context's error; the loop
// commits on its own once the threshold is reached.
func TestPartitionsFlushRetries(t *testing.T) {
	refused := errors.New("refused")
	ps, c := newPartitions(t)
	ps.Claim("t/0", 5, -1)
	c.refuse = refused
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := ps.Flush(ctx); !errors.Is(err, refused) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want the refusal and the deadline", err)
	}
	if _, rounds := c.at("t/0"); rounds < 2 {
		t.Fatalf("%d rounds, want retries", rounds)
	}

	done := make(chan struct{})
	loop := kit.NewPartitions(kit.PartitionsOptions[string]{Interval: time.Hour, Threshold: 2, Commit: func(moved []kit.Position[string]) error {
		if moved[0].Offset == 2 {
			close(done)
		}
		moved[0].Stored = true
		return nil
	}})
	defer loop.Close()
	p := loop.Claim("t/0", 0, 0)
	loop.Add(p, 0, rec(""), false)
	loop.Add(p, 1, rec(""), false)
	if err := loop.Ack(handles(take(loop)...)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("two acknowledgements (the threshold) started no commit round")
	}
}

// TestPartitionsNilCommitStoresAll: a Commit that returns nil stored every
// position, Stored set or not, so the next round sends none of them again.
func TestPartitionsNilCommitStoresAll(t *testing.T) {
	var rounds int
	ps := kit.NewPartitions(kit.PartitionsOptions[string]{Interval: time.Hour, Threshold: 1 << 30,
		Commit: func([]kit.Position[string]) error { rounds++; return nil }})
	defer ps.Close()
	p := ps.Claim("t/0", 0, -1)
	ps.Add(p, 0, rec(""), false)
	if err := ps.Ack(handles(take(ps)...)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ps.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if rounds != 1 {
		t.Fatalf("%d commit rounds, want 1", rounds)
	}
}

// TestPartitionsTakeInOrderAcrossPartialTakes: a ready queue that is never
// emptied by a Take (its storage reused, what waits moved to the front)
// hands out every record once, in the order added.
func TestPartitionsTakeInOrderAcrossPartialTakes(t *testing.T) {
	ps, _ := newPartitions(t)
	p := ps.Claim("t/0", 0, -1)
	next, want := int64(0), 0
	add := func(n int) {
		for range n {
			ps.Add(p, next, driver.Record{BrokerID: strconv.FormatInt(next, 10)}, false)
			next++
		}
	}
	add(100)
	for round := range 50 {
		rs := ps.Take(nil, 7+round%5)
		for _, r := range rs {
			if r.BrokerID != strconv.Itoa(want) {
				t.Fatalf("round %d: took %s, want %d", round, r.BrokerID, want)
			}
			want++
		}
		add(len(rs) + round%3)
	}
	if got, left := ps.Pending(), int(next)-want; got != left {
		t.Fatalf("Pending %d, want %d", got, left)
	}
}

// BenchmarkPartitionsAddTakeBacklog: one record added and one taken per
// operation with a backlog of 300 ready: the ready queue's storage is
// reused, not regrown.
func BenchmarkPartitionsAddTakeBacklog(b *testing.B) {
	ps := kit.NewPartitions(kit.PartitionsOptions[string]{Commit: func([]kit.Position[string]) error { return nil }, Interval: time.Hour, Threshold: 1 << 30})
	defer ps.Close()
	p := ps.Claim("t/0", 0, -1)
	off := int64(0)
	for ; off < 300; off++ {
		ps.Add(p, off, driver.Record{}, false)
	}
	out := make([]driver.Record, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		ps.Add(p, off, driver.Record{}, false)
		off++
		out = ps.Take(out[:0], 1)
	}
}

// TestPartitionsAddToHandsOutInOrder: AddTo appends a ready record to out
// only while nothing ready waits before it and out has room; the rest
// queue, a record whose key is out waits behind it, and what AddTo handed
// out is acknowledged as an added and taken one is.
func TestPartitionsAddToHandsOutInOrder(t *testing.T) {
	ps, c := newPartitions(t)
	p := ps.Claim("t/0", 0, -1)
	r0, r1, r2, r3 := rec("a"), rec("b"), rec("a"), rec("c")
	out := ps.AddTo(nil, 2, p, 0, &r0, false)
	out = ps.AddTo(out, 2, p, 1, &r1, false)
	out = ps.AddTo(out, 2, p, 2, &r2, false) // key a is out: waits
	out = ps.AddTo(out, 2, p, 3, &r3, false) // out is full: queued
	if len(out) != 2 || out[0].Message.Key != "a" || out[1].Message.Key != "b" || out[0].Handle == nil {
		t.Fatalf("AddTo handed out %v, want a and b with their handles", out)
	}
	if ps.Pending() != 2 {
		t.Fatalf("Pending %d, want 2 (c queued, the second a held)", ps.Pending())
	}
	r4 := rec("d")
	if more := ps.AddTo(nil, 5, p, 4, &r4, false); len(more) != 0 {
		t.Fatalf("AddTo handed out %v while c waited before it", more)
	}
	if err := ps.Ack(handles(out...)); err != nil {
		t.Fatal(err)
	}
	got := take(ps)
	var keys []string
	for _, r := range got {
		keys = append(keys, r.Message.Key)
	}
	if !slices.Equal(keys, []string{"c", "d", "a"}) {
		t.Fatalf("took %v, want c, d, then the released a", keys)
	}
	if err := ps.Ack(handles(got...)); err != nil {
		t.Fatal(err)
	}
	if err := ps.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pos, _ := c.at("t/0"); pos != 5 {
		t.Fatalf("committed %d, want 5", pos)
	}
}

// BenchmarkPartitionsAddAck: a consumer's round of 100 records, in runs of
// 25 from each of 4 partitions, distinct keys, added, taken and
// acknowledged in one Ack; per record.
func BenchmarkPartitionsAddAck(b *testing.B) {
	ps := kit.NewPartitions(kit.PartitionsOptions[string]{Commit: func([]kit.Position[string]) error { return nil }, Interval: time.Hour, Threshold: 1 << 30})
	defer ps.Close()
	parts := []*kit.Partition[string]{ps.Claim("t/0", 0, -1), ps.Claim("t/1", 0, -1), ps.Claim("t/2", 0, -1), ps.Claim("t/3", 0, -1)}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	out, hs := make([]driver.Record, 0, 100), make([]any, 0, 100)
	var offs [4]int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n := i / 25 % 4
		r := driver.Record{Message: ports.Message{Key: keys[i%len(keys)]}}
		out = ps.AddTo(out, 100, parts[n], offs[n], &r, false)
		if offs[n]++; len(out) == 100 {
			hs = hs[:0]
			for _, r := range out {
				hs = append(hs, r.Handle)
			}
			if err := ps.Ack(hs); err != nil {
				b.Fatal(err)
			}
			out = out[:0]
		}
	}
}
