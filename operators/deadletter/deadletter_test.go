package deadletter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	source = ports.Topic("orders")
	group  = "billing"
)

// fixture is a mem broker with an area declared and n dead letters in it.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	a    *mem.Adapter
	area *deadletter.Area
	log  *bytes.Buffer
}

func newFixture(t *testing.T, o deadletter.Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&log, nil))
	if o.Idle == 0 {
		o.Idle = 100 * time.Millisecond
	}
	area, err := deadletter.New(a, source, group, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := area.Declare(ctx, deadletter.Retention{}); err != nil {
		t.Fatal(err)
	}
	if err := ports.DeclareGroup(ctx, a, source, "app"); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: ctx, a: a, area: area, log: &log}
}

// deadLetter sends one message per key to the source topic and
// dead-letters each with reason(key).
func (f *fixture) deadLetter(keys []string, reason func(string) string) {
	f.t.Helper()
	msgs := make([]ports.Message, len(keys))
	for i, k := range keys {
		msgs[i] = ports.Message{Topic: source, Key: k, Payload: []byte(`{"secret":"` + k + `"}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-"+k, ports.HeaderType, "com.example.order.v1", ports.HeaderTime, "2026-01-02T03:04:05Z")}
	}
	if err := f.a.Send(f.ctx, msgs...); err != nil {
		f.t.Fatal(err)
	}
	sub, err := f.a.Subscribe(f.ctx, ports.SubscriptionSpec{Topic: source, Group: "app"})
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = sub.Stop(context.Background()) }()
	for got := 0; got < len(keys); {
		ds, err := sub.Receive(f.ctx, len(keys)-got)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, d := range ds {
			if err := sub.Settle(f.ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New(reason(d.Key)), Attempts: 1}); err != nil {
				f.t.Fatal(err)
			}
		}
		got += len(ds)
	}
}

// received drains what reached the source topic's group "app".
func (f *fixture) received(n int) []*ports.Delivery {
	f.t.Helper()
	sub, err := f.a.Subscribe(f.ctx, ports.SubscriptionSpec{Topic: source, Group: "app"})
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = sub.Stop(context.Background()) }()
	var out []*ports.Delivery
	for len(out) < n {
		ds, err := sub.Receive(f.ctx, n-len(out))
		if err != nil {
			f.t.Fatalf("received %d of %d redriven messages: %v", len(out), n, err)
		}
		if err := sub.Settle(f.ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}

func keys(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestListFiltersAndKeepsEverything(t *testing.T) {
	f := newFixture(t, deadletter.Options{Batch: 3})
	f.deadLetter(keys(5, "a"), func(string) string { return "negative total" })
	f.deadLetter(keys(2, "b"), func(string) string { return "unknown schema" })

	all, pass, err := f.area.List(f.ctx, deadletter.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 || !pass.Complete() {
		t.Fatalf("listed %d (pass %+v), want 7 in a complete pass", len(all), pass)
	}
	e := all[0]
	if e.Source != source || e.Attempts != 1 || e.Size == 0 || e.Type != "com.example.order.v1" || e.Published.IsZero() || e.Payload != nil {
		t.Fatalf("entry %+v: want source, attempts, size, type, publish time and no payload", e)
	}
	some, _, err := f.area.List(f.ctx, deadletter.Filter{Reason: "schema", Key: "b*"})
	if err != nil || len(some) != 2 {
		t.Fatalf("filtered list: %d entries, %v; want 2", len(some), err)
	}
	none, _, err := f.area.List(f.ctx, deadletter.Filter{Since: time.Now().Add(time.Hour)})
	if err != nil || len(none) != 0 {
		t.Fatalf("future time range: %d entries, %v; want 0", len(none), err)
	}
	again, _, _ := f.area.List(f.ctx, deadletter.Filter{})
	if len(again) != 7 {
		t.Fatalf("after three lists the area holds %d, want 7", len(again))
	}
}

func TestShowMasksUnlessRevealedWithAudit(t *testing.T) {
	f := newFixture(t, deadletter.Options{})
	f.deadLetter([]string{"k"}, func(string) string { return "bad" })
	e, err := f.area.Show(f.ctx, "id-k", deadletter.ShowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Masked || e.Payload != nil || e.Headers.Get(ports.HeaderDeadLetterReason) != "bad" {
		t.Fatalf("masked show %+v", e)
	}
	if _, err := f.area.Show(f.ctx, "id-k", deadletter.ShowOptions{Reveal: true}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("reveal without operator and note: %v, want ErrInvalid", err)
	}
	e, err = f.area.Show(f.ctx, "id-k", deadletter.ShowOptions{Reveal: true, Operator: "alice", Note: "ticket about k"})
	if err != nil || string(e.Payload) != `{"secret":"k"}` {
		t.Fatalf("revealed show %q, %v", e.Payload, err)
	}
	if !strings.Contains(f.log.String(), "action=reveal") {
		t.Fatalf("no reveal audit in the log:\n%s", f.log)
	}
	if _, err := f.area.Show(f.ctx, "nope", deadletter.ShowOptions{}); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
}

func TestRedriveConfirmsAuditsAndRefusesAfterMax(t *testing.T) {
	f := newFixture(t, deadletter.Options{Batch: 4, MaxRedrives: 1})
	f.deadLetter(keys(10, "k"), func(string) string { return "poison" })
	if _, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice"}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("redrive without a note: %v, want ErrInvalid", err)
	}
	dry, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "n", DryRun: true})
	if err != nil || len(dry.Selected) != 10 || dry.Done != 0 || dry.AuditID != "" {
		t.Fatalf("dry run %+v, %v", dry, err)
	}
	var progress []deadletter.Progress
	res, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "fixed in v2", Progress: func(p deadletter.Progress) { progress = append(progress, p) }})
	if err != nil || res.Done != 10 || res.AuditID == "" || len(res.Missing) != 0 {
		t.Fatalf("redrive %+v, %v", res, err)
	}
	if last := progress[len(progress)-1]; last.Sent != 10 || last.Settled != 10 {
		t.Fatalf("last progress %+v", last)
	}
	got := f.received(10)
	for _, d := range got {
		if d.Headers.Get(deadletter.HeaderRedriveCount) != "1" || d.Headers.Get(deadletter.HeaderRedriveAudit) != res.AuditID || d.Headers.Get(ports.HeaderDeadLetterReason) != "" {
			t.Fatalf("redriven headers %v", d.Headers)
		}
	}
	if left, _, _ := f.area.List(f.ctx, deadletter.Filter{}); len(left) != 0 {
		t.Fatalf("%d left in the area after the redrive", len(left))
	}

	// Dead-letter the redriven copies again: now at MaxRedrives.
	sub, err := f.a.Subscribe(f.ctx, ports.SubscriptionSpec{Topic: source, Group: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.Send(f.ctx, ports.Message{Topic: source, Key: "r", Headers: ports.NewHeaders(ports.HeaderID, "id-r", deadletter.HeaderRedriveCount, "1")}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(f.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(f.ctx, ds, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("still bad")}); err != nil {
		t.Fatal(err)
	}
	_ = sub.Stop(context.Background())
	refused, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "again"})
	if err != nil || len(refused.Refused) != 1 || refused.Done != 0 {
		t.Fatalf("redrive past the maximum %+v, %v: want it refused", refused, err)
	}
	forced, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "again", Force: true})
	if err != nil || forced.Done != 1 {
		t.Fatalf("forced redrive %+v, %v", forced, err)
	}
	if d := f.received(1)[0]; d.Headers.Get(deadletter.HeaderRedriveCount) != "2" {
		t.Fatalf("second redrive count %q, want 2", d.Headers.Get(deadletter.HeaderRedriveCount))
	}
}

func TestRedriveAbandonedMidwayLosesNothing(t *testing.T) {
	f := newFixture(t, deadletter.Options{Batch: 4})
	f.deadLetter(keys(10, "k"), func(string) string { return "poison" })
	ctx, cancel := context.WithCancel(f.ctx)
	sent := 0
	_, err := f.area.Redrive(ctx, deadletter.Request{Operator: "alice", Note: "crash test", Progress: func(p deadletter.Progress) {
		sent = p.Sent
		if p.Sent >= 4 {
			cancel() // a crash after the first batch's confirms
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned redrive returned %v, want context.Canceled", err)
	}
	res, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "resume"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.received(sent + res.Done)
	seen := map[string]int{}
	for _, d := range got {
		seen[d.ID]++
	}
	if len(seen) != 10 {
		t.Fatalf("%d distinct messages redriven, want 10", len(seen))
	}
	if dup := len(got) - 10; dup > 4 {
		t.Fatalf("%d duplicates, want at most one batch (4)", dup)
	}
}

func TestPurgeAndStats(t *testing.T) {
	f := newFixture(t, deadletter.Options{AlertAt: 3})
	f.deadLetter(keys(3, "a"), func(string) string { return "negative total" })
	f.deadLetter(keys(1, "b"), func(string) string { return "unknown schema" })
	s, err := f.area.Stats(f.ctx)
	if err != nil || s.Count != 4 || s.ByReason["negative total"] != 3 || !s.OverAlert {
		t.Fatalf("stats %+v, %v", s, err)
	}
	if !strings.Contains(f.log.String(), "over its alert threshold") {
		t.Fatalf("no alert line:\n%s", f.log)
	}
	res, err := f.area.Purge(f.ctx, deadletter.Request{Operator: "bob", Note: "test data", Filter: deadletter.Filter{Reason: "negative"}})
	if err != nil || res.Done != 3 {
		t.Fatalf("purge %+v, %v", res, err)
	}
	left, _, _ := f.area.List(f.ctx, deadletter.Filter{})
	if len(left) != 1 || left[0].Key != "b0" {
		t.Fatalf("left %+v, want b0 alone", left)
	}
}

func TestRepublishPutBackPagesPastTheWindow(t *testing.T) {
	f := newFixture(t, deadletter.Options{Batch: 3, PutBack: deadletter.PutBackRepublish})
	f.deadLetter(keys(5, "a"), func(string) string { return "negative total" })
	f.deadLetter(keys(2, "b"), func(string) string { return "unknown schema" })
	for range 2 {
		all, pass, err := f.area.List(f.ctx, deadletter.Filter{})
		if err != nil || len(all) != 7 || pass.End != deadletter.EndWrapped {
			t.Fatalf("listed %d (pass %+v), %v; want 7, wrapped", len(all), pass, err)
		}
	}
	res, err := f.area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "n", Filter: deadletter.Filter{Reason: "schema"}})
	if err != nil || res.Done != 2 {
		t.Fatalf("redrive %+v, %v", res, err)
	}
	f.received(2)
	left, _, _ := f.area.List(f.ctx, deadletter.Filter{})
	if len(left) != 5 {
		t.Fatalf("%d left, want 5", len(left))
	}
}

// hiding is an adapter whose subscription number hideOn (from 1) of the
// dead-letter topic never hands out the delivery of message id: it stays
// unsettled, as on a broker that keeps a message invisible for a while,
// and comes back when that subscription stops.
type hiding struct {
	ports.Adapter
	hideOn int32
	id     string
	subs   atomic.Int32
}

func (h *hiding) Unwrap() ports.Adapter { return h.Adapter }

func (h *hiding) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	sub, err := h.Adapter.Subscribe(ctx, spec)
	if err != nil || spec.Topic != ports.DeadLetterTopic(source) || h.subs.Add(1) != h.hideOn {
		return sub, err
	}
	return &hidingSub{Subscription: sub, id: h.id}, nil
}

type hidingSub struct {
	ports.Subscription
	id string
}

func (s *hidingSub) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	for {
		ds, err := s.Subscription.Receive(ctx, max)
		kept := slices.DeleteFunc(ds, func(d *ports.Delivery) bool { return d.Headers.Get(ports.HeaderID) == s.id })
		if err != nil || len(kept) > 0 {
			return kept, err
		}
	}
}

// A selected message the taking pass does not see (its first pass ended
// without it) is taken by the next pass: the redrive misses nothing.
func TestRedriveTakesWhatThePassDidNotSee(t *testing.T) {
	f := newFixture(t, deadletter.Options{Batch: 4})
	f.deadLetter(keys(6, "k"), func(string) string { return "poison" })
	h := &hiding{Adapter: f.a, hideOn: 2, id: "id-k3"} // 1: the listing pass, 2: the first taking pass
	area, err := deadletter.New(h, source, group, deadletter.Options{Batch: 4, Idle: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := area.Redrive(f.ctx, deadletter.Request{Operator: "alice", Note: "fixed"})
	if err != nil || res.Done != 6 || len(res.Missing) != 0 {
		t.Fatalf("redrive %+v, %v: want all 6 redriven, none missing", res, err)
	}
	if n := h.subs.Load(); n != 3 {
		t.Fatalf("%d subscriptions of the area, want 3 (list, take, take again)", n)
	}
	if got := f.received(6); len(got) != 6 {
		t.Fatalf("received %d redriven messages, want 6", len(got))
	}
}

// dlqWrapper is an adapter whose dead-letter subscriptions wrap makes.
type dlqWrapper struct {
	ports.Adapter
	wrap func(ports.Subscription) ports.Subscription
}

func (w dlqWrapper) Unwrap() ports.Adapter { return w.Adapter }

func (w dlqWrapper) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	sub, err := w.Adapter.Subscribe(ctx, spec)
	if err != nil || spec.Topic != ports.DeadLetterTopic(source) {
		return sub, err
	}
	return w.wrap(sub), nil
}

// laggingSub hands out the messages keyed "late…" only from its third
// Receive on, as a Kafka consumer does with a partition whose first fetch
// is slow while another partition's put-back copies already came round.
type laggingSub struct {
	ports.Subscription
	calls int
	late  []*ports.Delivery
}

func (s *laggingSub) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	s.calls++
	for {
		if s.calls >= 3 && len(s.late) > 0 {
			n := min(max, len(s.late))
			ds := s.late[:n:n]
			s.late = s.late[n:]
			return ds, nil
		}
		ds, err := s.Subscription.Receive(ctx, max)
		ds = slices.DeleteFunc(ds, func(d *ports.Delivery) bool {
			if strings.HasPrefix(d.Key, "late") {
				s.late = append(s.late, d)
				return true
			}
			return false
		})
		if err != nil || len(ds) > 0 {
			return ds, err
		}
	}
}

// A pass that receives its own put-back copies before another stream's
// first message does not end there: it waits for Options.Idle with
// nothing new, and lists the late stream too.
func TestListWaitsForALateStream(t *testing.T) {
	for name, pb := range map[string]deadletter.PutBack{"republish": deadletter.PutBackRepublish, "requeue": deadletter.PutBackRequeue} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, deadletter.Options{})
			f.deadLetter(keys(2, "early"), func(string) string { return "poison" })
			f.deadLetter(keys(3, "late"), func(string) string { return "poison" })
			area, err := deadletter.New(dlqWrapper{f.a, func(s ports.Subscription) ports.Subscription { return &laggingSub{Subscription: s} }}, source, group, deadletter.Options{Batch: 4, PutBack: pb,
				Idle: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(f.log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			all, pass, err := area.List(f.ctx, deadletter.Filter{})
			if err != nil || len(all) != 5 || pass.Examined != 5 || pass.End != deadletter.EndWrapped {
				t.Fatalf("listed %d (pass %+v), %v; want all 5, wrapped", len(all), pass, err)
			}
			again, _, err := f.area.List(f.ctx, deadletter.Filter{})
			if err != nil || len(again) != 5 {
				t.Fatalf("after the pass the area lists %d, %v; want the 5 still there", len(again), err)
			}
		})
	}
}

// eagerSub returns what it holds even after the caller's deadline, as a
// client that answers from its buffer does; after 100 receives it fails:
// a pass over a few messages that keeps putting back what went round does
// not end.
type eagerSub struct {
	ports.Subscription
	calls int
}

func (s *eagerSub) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if s.calls++; s.calls > 100 {
		return nil, errors.New("received 100 times: the pass keeps putting back what went round")
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Millisecond)
	defer cancel()
	ds, err := s.Subscription.Receive(rctx, max)
	if len(ds) > 0 {
		return ds, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, err
}

// An area larger than a batch, on a broker whose requeue puts a message
// behind the others, keeps handing the pass what went round: the pass
// puts a window of them back once, not again and again, and ends.
func TestPassOverABusyAreaEnds(t *testing.T) {
	f := newFixture(t, deadletter.Options{})
	f.deadLetter(keys(10, "k"), func(string) string { return "poison" })
	area, err := deadletter.New(dlqWrapper{f.a, func(s ports.Subscription) ports.Subscription { return &eagerSub{Subscription: s} }}, source, group, deadletter.Options{Batch: 4, PutBack: deadletter.PutBackRequeue,
		Idle: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	all, pass, err := area.List(f.ctx, deadletter.Filter{})
	if err != nil || len(all) != 10 || pass.End != deadletter.EndWrapped {
		t.Fatalf("listed %d (pass %+v), %v; want all 10, wrapped", len(all), pass, err)
	}
}
