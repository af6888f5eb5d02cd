package kafkaqueue_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// In a pipeline whose handler sees decoded values the share group's
// records keep their headers until asked for: each request id and each
// delivery kept with flow.DeliveryFrom reads its own record's, and the
// dead-letter copy of a poison record, made by the adapter from its
// record, carries the original headers.
func TestValueOnlyPipelineLoadsDeferredHeadersWhereRead(t *testing.T) {
	const n, poison = 60, 7
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("dh", 2))
	dead := subscribe(t, a, ports.DeadLetterTopic("t"), "dlq")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type msg struct {
		N int `json:"n"`
	}
	var mu sync.Mutex
	reqs := make([]string, n)
	kept := map[int]*ports.Delivery{}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 16, Start: ports.StartEarliest})
	flow.Sink(flow.Decode[msg](p.Source()), func(ctx context.Context, v msg) error {
		mu.Lock()
		defer mu.Unlock()
		if v.N < 0 || v.N >= n {
			t.Errorf("handled %+v: no such record", v)
			return nil
		}
		reqs[v.N] = flow.RequestID(ctx)
		if v.N%10 == 0 {
			kept[v.N] = flow.DeliveryFrom(ctx)
		}
		if v.N == poison {
			return ports.Poison(errors.New("record 7 is poison"))
		}
		return nil
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	msgs := make([]ports.Message, n)
	for i := range msgs {
		v := strconv.Itoa(i)
		msgs[i] = ports.Message{Topic: "t", Key: "k" + v, Payload: []byte(`{"n":` + v + `}`), Headers: ports.NewHeaders("x-n", v, ports.HeaderRequestID, "req-"+v)}
	}
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitSettled(ctx, n); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, r := range reqs {
		if want := "req-" + strconv.Itoa(i); r != want {
			t.Fatalf("record %d: request id %q, want %q", i, r, want)
		}
	}
	for i, d := range kept {
		if v := strconv.Itoa(i); d == nil || d.Headers.Get("x-n") != v || string(d.Payload) != `{"n":`+v+`}` || d.Facts.Get("share-group") == "" {
			t.Fatalf("kept delivery of record %d reads headers %v, payload %s, facts %s", i, d.Headers, d.Payload, d.Facts)
		}
	}
	c := receive(t, dead, 20*time.Second, "the dead-letter copy")
	if c.Headers.Get("x-n") != strconv.Itoa(poison) || c.Headers.Get(ports.HeaderRequestID) != "req-7" || c.Headers.Get(ports.HeaderDeadLetterReason) == "" {
		t.Fatalf("dead-letter copy headers %v, want record %d's with a reason", c.Headers, poison)
	}
}
