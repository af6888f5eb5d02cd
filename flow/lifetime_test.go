package flow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// What a handler may keep past its delivery's settlement: the delivery,
// the item's context and its completion. None of them is reused for a
// later delivery (roots are carved from chunks shared by consecutive
// receives, never given a second life), so after many more deliveries were
// received and settled each still answers for its own delivery, and a late
// completion is refused without settling anything. Run with -race: a
// record given to a later delivery would be written while the test reads
// it. Deliveries are received in batches larger than a chunk, and one at
// a time, each settled before the next is received (consecutive receives
// then share a chunk, the settled roots' neighbours being handed out
// afterwards).
func TestKeptAfterSettlementStayTheirOwn(t *testing.T) {
	t.Run("batches", func(t *testing.T) { keptAfterSettlement(t, 4, 50, 50) })
	t.Run("one-at-a-time", func(t *testing.T) { keptAfterSettlement(t, 2, 100, 1) })
}

func keptAfterSettlement(t *testing.T, rounds, per, push int) {
	type kept struct {
		d       *ports.Delivery
		ctx     context.Context
		c       *flow.Completion
		id, req string
	}
	var mu sync.Mutex
	var ks []kept
	f, p := start(t, spec, func(p *flow.Pipeline) {
		out := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[*ports.Delivery]) {
			mu.Lock()
			ks = append(ks, kept{d: it.Value, ctx: it.Ctx, c: it.Completion, id: it.Value.ID, req: it.Value.Headers.Get(ports.HeaderRequestID)})
			mu.Unlock()
			_ = it.Succeed()
		})
		flow.Sink(out, func(context.Context, *ports.Delivery) error { return nil })
	})
	for r := range rounds {
		batch := make([]*ports.Delivery, per)
		for i := range batch {
			id := fmt.Sprintf("r%d-%d", r, i)
			batch[i] = &ports.Delivery{
				Message: ports.Message{Topic: "t", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id, ports.HeaderRequestID, "req-"+id)},
				ID:      id,
			}
		}
		for i := 0; i < per; i += push {
			f.push(batch[i : i+push]...) // received together, then settled
			f.waitSettled(t, r*per+i+push)
		}
	}
	// The adapter records a settlement before the pipeline counts it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitSettled(ctx, int64(rounds*per)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ks) != rounds*per {
		t.Fatalf("handled %d, want %d", len(ks), rounds*per)
	}
	for _, k := range ks {
		if k.d.ID != k.id || string(k.d.Payload) != k.id {
			t.Fatalf("kept delivery %s now reads as %s with payload %q", k.id, k.d.ID, k.d.Payload)
		}
		if d := flow.DeliveryFrom(k.ctx); d != k.d {
			t.Fatalf("kept context of %s answers delivery %v", k.id, d)
		}
		if got := flow.RequestID(k.ctx); got != k.req {
			t.Fatalf("kept context of %s answers request id %q, want %q", k.id, got, k.req)
		}
		if err := k.c.Succeed(); !errors.Is(err, ports.ErrAlreadyCompleted) {
			t.Fatalf("second Succeed of %s = %v, want ErrAlreadyCompleted", k.id, err)
		}
		if err := k.c.Fail(errTransient); !errors.Is(err, ports.ErrConflict) {
			t.Fatalf("late Fail of %s = %v, want ErrConflict", k.id, err)
		}
		if o := k.c.Outcome(); o.Kind != flow.Succeeded {
			t.Fatalf("kept completion of %s reports %v, want its own outcome (succeeded)", k.id, o.Kind)
		}
	}
	if n := len(f.settlements()); n != rounds*per {
		t.Fatalf("%d settlements, want %d: a late completion was settled", n, rounds*per)
	}
	if st := p.Stats(); st.Conflicts != int64(rounds*per) || st.Acked != int64(rounds*per) {
		t.Fatalf("stats %+v, want %d acked and %d conflicts (the late Fails)", st, rounds*per, rounds*per)
	}
}
