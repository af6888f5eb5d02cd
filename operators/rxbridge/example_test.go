package rxbridge_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/reactivex/rxgo/v2"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/rxbridge"
	"github.com/sluicemq/sluice/ports"
)

// Parse and filter in rxgo, handle in the pipeline: dropped values are
// acked, failed ones requeued, and every delivery is settled once. (The
// retry backoff is an hour so that the requeued "x" is not redelivered
// before the example stops.)
func ExampleThrough() {
	ctx := context.Background()
	broker, err := mem.NewBroker()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close(ctx)
	a, err := mem.New(broker)
	if err != nil {
		fmt.Println(err)
		return
	}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "nums", Group: "g",
		Retry: ports.RetryPolicy{MaxAttempts: 5, Backoff: time.Hour, MaxBackoff: time.Hour}})

	evens := rxbridge.Through[*ports.Delivery, int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
		return o.Map(rxbridge.Map(func(_ context.Context, d *ports.Delivery) (int, error) {
			return strconv.Atoi(string(d.Payload))
		})).Filter(rxbridge.Keep(func(_ context.Context, n int) (bool, error) { return n%2 == 0, nil }))
	})
	sum := 0
	flow.Sink(evens, func(_ context.Context, n int) error { sum += n; return nil })

	if err := p.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []string{"1", "2", "3", "4", "x"} {
		if err := a.Send(ctx, ports.Message{Topic: "nums", Payload: []byte(s)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := p.Stats(); st.Acked+st.Requeued < 5; st = p.Stats() {
		if time.Now().After(deadline) {
			fmt.Println("not settled within 10s:", st)
			return
		}
		time.Sleep(time.Millisecond) // polling counters, bounded by the deadline
	}
	if err := p.Stop(ctx); err != nil {
		fmt.Println(err)
		return
	}
	st := p.Stats()
	fmt.Println("sum", sum, "acked", st.Acked, "requeued", st.Requeued)
	// Output: sum 6 acked 4 requeued 1
}
