package flow_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func TestCompletionStateMachine(t *testing.T) {
	poison := ports.Poisonf("bad")
	complete := map[string]func(*flow.Completion) error{
		"succeed": (*flow.Completion).Succeed,
		"fail":    func(c *flow.Completion) error { return c.Fail(errTransient) },
		"poison":  func(c *flow.Completion) error { return c.Fail(poison) },
		"cancel":  func(c *flow.Completion) error { return c.Cancel(context.Canceled) },
	}
	kind := map[string]flow.Kind{"succeed": flow.Succeeded, "fail": flow.Failed, "poison": flow.Poisoned, "cancel": flow.Cancelled}
	for first, f1 := range complete {
		for second, f2 := range complete {
			t.Run(first+"_then_"+second, func(t *testing.T) {
				var got []flow.Outcome
				c := flow.NewCompletion(func(o flow.Outcome) { got = append(got, o) })
				if err := f1(c); err != nil {
					t.Fatalf("first completion: %v", err)
				}
				err := f2(c)
				switch {
				case first == second && !errors.Is(err, ports.ErrAlreadyCompleted):
					t.Fatalf("repeat returned %v, want ErrAlreadyCompleted", err)
				case first != second && !errors.Is(err, ports.ErrConflict):
					t.Fatalf("conflicting second returned %v, want ErrConflict", err)
				}
				if len(got) != 1 || got[0].Kind != kind[first] {
					t.Fatalf("notified %v, want exactly one %v", got, kind[first])
				}
				if c.Outcome().Kind != kind[first] {
					t.Fatalf("Outcome %v, want the first %v", c.Outcome().Kind, kind[first])
				}
			})
		}
	}
}

func TestFailNilSucceedsAndCompleteRejectsPending(t *testing.T) {
	c := flow.NewCompletion(func(flow.Outcome) {})
	if err := c.Complete(flow.Outcome{}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Complete(Pending) = %v, want ErrInvalid", err)
	}
	if err := c.Fail(nil); err != nil || c.Outcome().Kind != flow.Succeeded {
		t.Fatalf("Fail(nil) = %v, outcome %v; want success", err, c.Outcome().Kind)
	}
}

func TestDoneClosesOnCompletion(t *testing.T) {
	c := flow.NewCompletion(func(flow.Outcome) {})
	done := c.Done()
	select {
	case <-done:
		t.Fatal("Done closed before completion")
	default:
	}
	_ = c.Succeed()
	<-done
	<-c.Done() // also after completion
}

func TestSplitTakesMostSevereOutcome(t *testing.T) {
	cases := []struct {
		name string
		kids []func(*flow.Completion) error
		want flow.Kind
	}{
		{"all succeed", []func(*flow.Completion) error{(*flow.Completion).Succeed, (*flow.Completion).Succeed}, flow.Succeeded},
		{"one fails", []func(*flow.Completion) error{(*flow.Completion).Succeed, func(c *flow.Completion) error { return c.Fail(errTransient) }}, flow.Failed},
		{"cancel beats fail", []func(*flow.Completion) error{func(c *flow.Completion) error { return c.Cancel(nil) }, func(c *flow.Completion) error { return c.Fail(errTransient) }}, flow.Cancelled},
		{"poison beats all", []func(*flow.Completion) error{func(c *flow.Completion) error { return c.Cancel(nil) }, func(c *flow.Completion) error { return c.Fail(ports.Poisonf("p")) }, (*flow.Completion).Succeed}, flow.Poisoned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []flow.Outcome
			parent := flow.NewCompletion(func(o flow.Outcome) { got = append(got, o) })
			kids := parent.Split(len(tc.kids))
			for i, k := range kids {
				if len(got) != 0 {
					t.Fatalf("parent completed after %d of %d children", i, len(kids))
				}
				if err := tc.kids[i](k); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 1 || got[0].Kind != tc.want {
				t.Fatalf("parent outcome %v, want one %v", got, tc.want)
			}
		})
	}
}

func TestSplitZeroSucceeds(t *testing.T) {
	c := flow.NewCompletion(func(flow.Outcome) {})
	if kids := c.Split(0); kids != nil || c.Outcome().Kind != flow.Succeeded {
		t.Fatalf("Split(0) gave %v and outcome %v, want none and success", kids, c.Outcome().Kind)
	}
}

func TestJoinCompletesEveryMember(t *testing.T) {
	var outs []flow.Kind
	mk := func() *flow.Completion {
		return flow.NewCompletion(func(o flow.Outcome) { outs = append(outs, o.Kind) })
	}
	a, b, c := mk(), mk(), mk()
	batch := flow.Join(a, b, c)
	if err := batch.Fail(ports.Poisonf("batch rejected")); err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 {
		t.Fatalf("members notified %d times, want 3", len(outs))
	}
	for _, k := range outs {
		if k != flow.Poisoned {
			t.Fatalf("member outcome %v, want poisoned like the batch", k)
		}
	}
}
