package operators_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

var errBadSKU = errors.New("unknown sku")

type quotaError struct{ tenant string }

func (e *quotaError) Error() string { return "quota exceeded for " + e.tenant }

func TestClassifyStagePoisonsByRule(t *testing.T) {
	c := operators.Classifier{Rules: []operators.Rule{
		operators.PoisonIs(errBadSKU),
		operators.PoisonAs[*quotaError](),
		operators.PoisonIf(func(err error) bool { return err.Error() == "negative total" }),
	}}
	var syntaxErr error = json.Unmarshal([]byte("{"), new(map[string]any))
	cases := map[string]struct {
		err  error
		want ports.Action
	}{
		"is":          {fmt.Errorf("line 3: %w", errBadSKU), ports.DeadLetter},
		"as":          {fmt.Errorf("wrapped: %w", &quotaError{"t1"}), ports.DeadLetter},
		"predicate":   {errors.New("negative total"), ports.DeadLetter},
		"json":        {fmt.Errorf("decode: %w", syntaxErr), ports.DeadLetter},
		"schema":      {&operators.SchemaVersionError{Type: "order", Version: "v9", Want: "v1,v2"}, ports.DeadLetter},
		"transient":   {errTransient, ports.Requeue},
		"unmatched":   {errors.New("db down"), ports.Requeue},
		"success":     {nil, ports.Ack},
		"poison kept": {ports.Poisonf("already poison"), ports.DeadLetter},
	}
	byPayload := map[string]error{}
	var ds []*ports.Delivery
	for name, tc := range cases {
		byPayload[name] = tc.err
		ds = append(ds, msg(name, ""))
	}
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Classify(p.Source(), c), func(_ context.Context, d *ports.Delivery) error {
			return byPayload[string(d.Payload)]
		})
	})
	r.f.push(ds...)
	r.f.waitSettled(t, len(ds))
	got := r.f.byID()
	for _, d := range ds {
		tc := cases[string(d.Payload)]
		if s := got[d.ID]; len(s) != 1 || s[0].Action != tc.want {
			t.Errorf("%s: settled %v, want %v", d.Payload, actions(s), tc.want)
		} else if tc.want == ports.DeadLetter && !errors.Is(s[0].Reason, tc.err) {
			t.Errorf("%s: reason %v does not wrap %v", d.Payload, s[0].Reason, tc.err)
		}
	}
}

func TestClassifyCoversSplitAndBatchedDescendants(t *testing.T) {
	r := newRig(t, spec, func(p *flow.Pipeline) {
		parts := flow.FlatMap(operators.Classify(p.Source(), operators.Classifier{Rules: []operators.Rule{operators.PoisonIs(errBadSKU)}}),
			func(context.Context, *ports.Delivery) ([]int, error) { return []int{1, 2}, nil })
		flow.Sink(parts, func(_ context.Context, n int) error {
			if n == 2 {
				return errBadSKU
			}
			return nil
		})
	})
	r.f.push(msg("x", ""))
	if s := r.f.waitSettled(t, 1); s[0].disp.Action != ports.DeadLetter {
		t.Fatalf("settled %v, want DEAD_LETTER: a derived part failed with a poison-by-rule error", s[0].disp.Action)
	}
}

func TestClassifierNeverPoisonsContextErrors(t *testing.T) {
	c := operators.Classifier{Rules: []operators.Rule{operators.PoisonIf(func(error) bool { return true })}}
	if err := c.Classify(context.Canceled); ports.IsPoison(err) {
		t.Fatal("a cancellation became poison")
	}
	if err := c.Classify(errors.New("x")); !ports.IsPoison(err) {
		t.Fatal("a matching rule did not poison")
	}
	if err := (operators.Classifier{NoDefaults: true}).Classify(&json.SyntaxError{}); ports.IsPoison(err) {
		t.Fatal("NoDefaults still applied the default rules")
	}
}

func TestWrapClassifiesHandlerErrors(t *testing.T) {
	h := operators.Wrap(operators.Classifier{Rules: []operators.Rule{operators.PoisonIs(errBadSKU)}},
		func(context.Context, int) error { return errBadSKU })
	if err := h(context.Background(), 1); !ports.IsPoison(err) || !errors.Is(err, errBadSKU) {
		t.Fatalf("Wrap returned %v, want poison wrapping errBadSKU", err)
	}
}

func TestClassifyCancellationSettlesNothing(t *testing.T) {
	entered := make(chan struct{}, 2)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Classify(p.Source(), operators.Classifier{}), func(ctx context.Context, _ *ports.Delivery) error {
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, flow.Workers(2))
	})
	r.f.push(msgs(2)...)
	waitN(t, entered, 2, "handlers")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v after cancellation", s)
	}
}
