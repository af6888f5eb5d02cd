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
// acked, failed ones requeued, and every delivery is settled once.
func ExampleThrough() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "nums", Group: "g", Retry: ports.RetryPolicy{MaxAttempts: 5}})

	evens := rxbridge.Through[*ports.Delivery, int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
		return o.Map(rxbridge.Map(func(_ context.Context, d *ports.Delivery) (int, error) {
			return strconv.Atoi(string(d.Payload))
		})).Filter(rxbridge.Keep(func(_ context.Context, n int) (bool, error) { return n%2 == 0, nil }))
	})
	sum := 0
	flow.Sink(evens, func(_ context.Context, n int) error { sum += n; return nil })

	_ = p.Start(ctx)
	for _, s := range []string{"1", "2", "3", "4", "x"} {
		_ = a.Send(ctx, ports.Message{Topic: "nums", Payload: []byte(s)})
	}
	for st := p.Stats(); st.Acked+st.Requeued < 5; st = p.Stats() {
		time.Sleep(time.Millisecond)
	}
	_ = p.Stop(ctx)
	st := p.Stats()
	fmt.Println("sum", sum, "acked", st.Acked, "requeued", st.Requeued)
	// Output: sum 6 acked 4 requeued 1
}
