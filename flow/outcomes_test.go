package flow_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// joinBatches groups every n deliveries into one item whose completion is
// the Join of their completions.
func joinBatches(p *flow.Pipeline, n int) flow.Stream[[]*ports.Delivery] {
	return flow.Operate(p.Source(), func(ctx context.Context, in <-chan flow.Item[*ports.Delivery], out chan<- flow.Item[[]*ports.Delivery]) error {
		var (
			ds []*ports.Delivery
			cs []*flow.Completion
		)
		for it := range in {
			ds, cs = append(ds, it.Value), append(cs, it.Completion)
			if len(ds) == n {
				out <- flow.Item[[]*ports.Delivery]{Ctx: ctx, Value: ds, Completion: flow.Join(cs...)}
				ds, cs = nil, nil
			}
		}
		for _, c := range cs {
			_ = c.Cancel(ctx.Err())
		}
		return nil
	})
}

// A batch of 10 with 2 members requeued, 2 dead-lettered and 6 acked is
// settled with 3 Settle calls, each member with its own disposition.
func TestMemberOutcomesSettleOneCallPerDisposition(t *testing.T) {
	const size = 10
	g := newGated()
	sp := spec
	sp.InFlight = size
	errBusy := errors.New("shard busy")
	errBad := errors.New("unknown customer")
	p := startGated(t, g, sp, func(p *flow.Pipeline) {
		flow.Sink(joinBatches(p, size), func(_ context.Context, b []*ports.Delivery) error {
			var out flow.MemberOutcomes
			out.Requeue(1, errBusy)
			out.Requeue(4, errBusy)
			out.DeadLetter(2, errBad)
			out.DeadLetter(7, errBad)
			return out.Err()
		})
	})
	ds := deliveries(size)
	g.push(ds...)
	got := g.waitSettled(t, size)
	if calls := g.callSizes(); len(calls) != 3 {
		t.Fatalf("Settle calls %v: want 3 (6 acks, 2 requeues, 2 dead letters)", calls)
	}
	want := map[string]ports.Action{}
	for i, d := range ds {
		switch i {
		case 1, 4:
			want[d.ID] = ports.Requeue
		case 2, 7:
			want[d.ID] = ports.DeadLetter
		default:
			want[d.ID] = ports.Ack
		}
	}
	seen := map[string]int{}
	for _, s := range got {
		seen[s.id]++
		if s.disp.Action != want[s.id] {
			t.Errorf("member %s settled %v, want %v", s.id, s.disp.Action, want[s.id])
		}
		switch s.disp.Action {
		case ports.Requeue:
			if !errors.Is(s.disp.Reason, errBusy) || s.disp.Attempts != 1 || s.disp.Delay <= 0 {
				t.Errorf("requeue of %s: %+v, want reason %q, attempt 1 and a backoff", s.id, s.disp, errBusy)
			}
		case ports.DeadLetter:
			if !strings.Contains(s.disp.ReasonText(), errBad.Error()) {
				t.Errorf("dead letter of %s has reason %q, want its own %q", s.id, s.disp.ReasonText(), errBad)
			}
		}
	}
	for _, d := range ds {
		if seen[d.ID] != 1 {
			t.Errorf("member %s settled %d times, want once", d.ID, seen[d.ID])
		}
	}
	waitStats(t, p, "6 acked, 2 requeued, 2 dead-lettered in 3 Settle calls", func(st flow.Stats) bool {
		return st.Acked == 6 && st.Requeued == 2 && st.DeadLettered == 2 && st.SettleCalls == 3
	})
}

// Requeued members keep the retry bound: a member whose last attempt is
// requeued is dead-lettered, and members with different redelivery counts
// or reasons get calls of their own.
func TestMemberOutcomesKeepTheRetryBoundAndSplitByCountAndReason(t *testing.T) {
	g := newGated()
	sp := spec // MaxAttempts 3
	sp.InFlight = 4
	startGated(t, g, sp, func(p *flow.Pipeline) {
		flow.Sink(joinBatches(p, 4), func(_ context.Context, b []*ports.Delivery) error {
			var out flow.MemberOutcomes
			out.Requeue(0, errTransient)
			out.Requeue(1, errTransient)
			out.Requeue(2, errors.New("another reason"))
			return out.Err()
		})
	})
	ds := []*ports.Delivery{delivery(`{}`, 0), delivery(`{}`, 2), delivery(`{}`, 0), delivery(`{}`, 0)}
	g.push(ds...)
	got := g.waitSettled(t, 4)
	by := map[string]ports.Disposition{}
	for _, s := range got {
		by[s.id] = s.disp
	}
	if a := by[ds[1].ID].Action; a != ports.DeadLetter {
		t.Errorf("member on its last attempt settled %v, want DEAD_LETTER (retries exhausted)", a)
	}
	if a := by[ds[0].ID].Action; a != ports.Requeue {
		t.Errorf("member 0 settled %v, want REQUEUE", a)
	}
	if a := by[ds[3].ID].Action; a != ports.Ack {
		t.Errorf("member 3 (not named) settled %v, want ACK", a)
	}
	// ack, requeue(count 0, transient), dead letter (count 2), requeue (other reason).
	if calls := g.callSizes(); len(calls) != 4 {
		t.Fatalf("Settle calls %v: want 4", calls)
	}
}

// An index outside the batch requeues the whole batch instead of acking
// members the handler never looked at.
func TestMemberOutcomesOutOfRangeFailsTheBatch(t *testing.T) {
	g := newGated()
	sp := spec
	sp.InFlight = 3
	startGated(t, g, sp, func(p *flow.Pipeline) {
		flow.Sink(joinBatches(p, 3), func(_ context.Context, b []*ports.Delivery) error {
			var out flow.MemberOutcomes
			out.DeadLetter(3, errTransient)
			return out.Err()
		})
	})
	g.push(deliveries(3)...)
	for _, s := range g.waitSettled(t, 3) {
		var re *flow.MemberRangeError
		if s.disp.Action != ports.Requeue || !errors.As(s.disp.Reason, &re) || re.Index != 3 || re.Size != 3 {
			t.Fatalf("member %s settled %+v, want REQUEUE with a *MemberRangeError for index 3 of 3", s.id, s.disp)
		}
	}
}

// An empty MemberOutcomes is no error: the whole batch is acked.
func TestMemberOutcomesEmptyIsSuccess(t *testing.T) {
	var out flow.MemberOutcomes
	if err := out.Err(); err != nil {
		t.Fatalf("empty MemberOutcomes.Err() = %v, want nil", err)
	}
	out.Requeue(0, nil)
	out.Ack(0)
	if err := out.Err(); err != nil {
		t.Fatalf("MemberOutcomes with every member acked: Err() = %v, want nil", err)
	}
	out.DeadLetter(2, nil)
	if err := out.Err(); err == nil || !strings.Contains(err.Error(), "[2] dead-letter") {
		t.Fatalf("Err() = %v, want it to name member 2", err)
	}
}
