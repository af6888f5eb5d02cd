package kafka_test

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

// TestValueOnlyPipelineLoadsDeferredHeadersWhereRead: in a pipeline whose
// handler sees decoded values, the records' headers stay in franz-go's
// records (the pipeline recycles the deliveries) until a handler asks:
// every request id reads its own record's, every delivery kept with
// flow.DeliveryFrom reads its own headers, key, payload and facts after
// the rest were handled and recycled, and a dead letter carries the
// original's headers. Run with -race: a kept delivery's memory reused
// for another record would be written while read here.
func TestValueOnlyPipelineLoadsDeferredHeadersWhereRead(t *testing.T) {
	const n = 600
	b := newBroker(t)
	a := b.adapter(t, b.config("dh", 2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("t"), Group: "ops", Start: ports.StartEarliest})
	msgs := make([]ports.Message, n)
	for i := range msgs {
		v := strconv.Itoa(i)
		msgs[i] = ports.Message{Topic: "t", Key: "k" + strconv.Itoa(i%7), Payload: []byte(`{"n":` + v + `}`),
			Headers: ports.NewHeaders("x-n", v, ports.HeaderRequestID, "req-"+v)}
	}
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	type msg struct {
		N int `json:"n"`
	}
	const poison = 7
	var mu sync.Mutex
	kept := map[int]*ports.Delivery{}
	reqs := make([]string, n)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 32, Start: ports.StartEarliest})
	flow.Sink(flow.Decode[msg](p.Source()), func(ctx context.Context, v msg) error {
		mu.Lock()
		defer mu.Unlock()
		if v.N < 0 || v.N >= n || reqs[v.N] != "" {
			t.Errorf("handled %+v: no such record, or again", v)
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
	if len(kept) != n/10 {
		t.Fatalf("kept %d deliveries, want %d", len(kept), n/10)
	}
	for i, d := range kept {
		v := strconv.Itoa(i)
		if d == nil || d.Headers.Get("x-n") != v || d.Key != "k"+strconv.Itoa(i%7) || string(d.Payload) != `{"n":`+v+`}` ||
			d.Facts.Get("offset") == "" || d.Facts.Get("topic") != "dh.t" || d.Facts.Get("generation") == "" {
			t.Fatalf("kept delivery of record %d reads headers %v, key %q, payload %s, facts %s", i, d.Headers, d.Key, d.Payload, d.Facts)
		}
	}
	dead := receiveN(t, dlq, 1, 20*time.Second)[0]
	if dead.Headers.Get("x-n") != strconv.Itoa(poison) || dead.Headers.Get(ports.HeaderRequestID) != "req-7" || dead.Headers.Get(ports.HeaderDeadLetterReason) == "" {
		t.Fatalf("dead letter headers %v, want record %d's with a reason", dead.Headers, poison)
	}
}
