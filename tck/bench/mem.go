package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The mem suite runs one workload three ways in one process:
//
//   - "channels": a plain Go channel pipeline — producer → decode → map →
//     sink goroutines joined by buffered channels of capacity InFlight;
//   - "mem": the same work through the in-process broker and a flow
//     pipeline (Decode → Map → Sink, acked by the pipeline);
//   - "mem-spi": the same work on the adapter SPI directly (Receive,
//     decode, map, Settle), to separate the broker's cost from flow's.
//
// Every contender encodes each message as JSON on the producer side and
// decodes it on the consumer side. Latency is publish → settled (for
// channels: publish → sink done).
func init() { register("mem", memSuite) }

// benchOrder is the workload's message.
type benchOrder struct {
	ID    int    `json:"id"`
	Qty   int    `json:"qty"`
	Price int    `json:"price"`
	Note  string `json:"note"`
}

// benchLine is what the map stage makes of an order.
type benchLine struct {
	ID    int
	Total int
}

// memRounds is how many times each contender runs, interleaved, so a burst
// of load from other processes does not land on one contender only; each
// contender reports its median round by throughput.
const memRounds = 3

func memSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	note := strings.Repeat("x", max(cfg.Payload-40, 0)) // ~cfg.Payload bytes of JSON
	runs := []func(context.Context, Config, string) (Result, error){runChannels, runMemFlow, runMemSPI}
	rounds := make([][]Result, len(runs))
	for range memRounds {
		for i, run := range runs {
			r, err := run(ctx, cfg, note)
			if err != nil {
				return nil, nil, err
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	results := make([]Result, len(runs))
	for i, rs := range rounds {
		slices.SortFunc(rs, func(x, y Result) int { return cmp.Compare(x.Rate(), y.Rate()) })
		results[i] = rs[len(rs)/2]
		results[i].Note = strings.TrimPrefix(results[i].Note+fmt.Sprintf(", median of %d rounds", memRounds), ", ")
	}
	return results, []Ratio{
		{Label: "mem/channels", Num: "mem", Den: "channels"},
		{Label: "mem-spi/channels", Num: "mem-spi", Den: "channels"},
	}, nil
}

func order(i int, note string) benchOrder {
	return benchOrder{ID: i, Qty: i%7 + 1, Price: 100 + i%13, Note: note}
}

func mapLine(o benchOrder) benchLine { return benchLine{ID: o.ID, Total: o.Qty * o.Price} }

func runChannels(ctx context.Context, cfg Config, note string) (Result, error) {
	type raw struct {
		payload []byte
		sent    time.Time
	}
	type decoded struct {
		o    benchOrder
		sent time.Time
	}
	type mapped struct {
		l    benchLine
		sent time.Time
	}
	lat := &Latencies{d: make([]time.Duration, 0, cfg.N)}
	raws := make(chan raw, cfg.InFlight)
	decs := make(chan decoded, cfg.InFlight)
	maps := make(chan mapped, cfg.InFlight)
	var m Meter
	m.Start()
	go func() { // producer
		defer close(raws)
		for i := range cfg.N {
			b, _ := json.Marshal(order(i, note))
			select {
			case raws <- raw{payload: b, sent: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { // decode stage
		defer close(decs)
		for r := range raws {
			var o benchOrder
			if err := json.Unmarshal(r.payload, &o); err == nil {
				decs <- decoded{o: o, sent: r.sent}
			}
		}
	}()
	go func() { // map stage
		defer close(maps)
		for d := range decs {
			maps <- mapped{l: mapLine(d.o), sent: d.sent}
		}
	}()
	n := 0
	for l := range maps { // sink: the "settlement" is the end of the line
		_ = l.l
		lat.Add(time.Since(l.sent))
		n++
	}
	if n != cfg.N {
		return Result{}, fmt.Errorf("channels: %d of %d delivered: %v", n, cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(n)
	p50, p99 := lat.Percentiles()
	return Result{Name: "channels", Deliveries: n, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99}, nil
}

// memProducer sends cfg.N orders one Send at a time, recording each send
// time before the Send (read back after the message is settled).
func memProducer(ctx context.Context, a ports.Sender, cfg Config, note string, sentAt []time.Time) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for i := range cfg.N {
			b, _ := json.Marshal(order(i, note))
			sentAt[i] = time.Now()
			if err := a.Send(ctx, ports.Message{Topic: "bench.orders", Payload: b}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return errc
}

func runMemFlow(ctx context.Context, cfg Config, note string) (Result, error) {
	b, a, err := memBroker()
	if err != nil {
		return Result{}, err
	}
	defer b.Close(context.Background())
	sentAt := make([]time.Time, cfg.N)
	lat := &Latencies{d: make([]time.Duration, 0, cfg.N)}
	var acked atomic.Int64
	done := make(chan struct{})
	spec := ports.SubscriptionSpec{Topic: "bench.orders", Group: "bench", InFlight: cfg.InFlight}
	p := flow.New(a, spec, flow.WithObserver(func(e flow.Event) {
		if e.Action != ports.Ack {
			return
		}
		lat.Add(time.Since(sentAt[orderID(e.Delivery.Payload)]))
		if acked.Add(1) == int64(cfg.N) {
			close(done)
		}
	}))
	lines := flow.Map(flow.Decode[benchOrder](p.Source()), func(_ context.Context, o benchOrder) (benchLine, error) {
		return mapLine(o), nil
	})
	flow.Sink(lines, func(context.Context, benchLine) error { return nil })
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())

	var m Meter
	m.Start()
	errc := memProducer(ctx, a, cfg, note, sentAt)
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("mem: %d of %d acked: %w (stats %+v)", acked.Load(), cfg.N, ctx.Err(), p.Stats())
	}
	el, allocs := m.Stop(cfg.N)
	if err := <-errc; err != nil {
		return Result{}, fmt.Errorf("mem: send: %w", err)
	}
	p50, p99 := lat.Percentiles()
	r := Result{Name: "mem", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99, Note: "flow Decode→Map→Sink"}
	if cfg.Batch > 0 {
		r.Note += ", -batch ignored"
	}
	return r, nil
}

func runMemSPI(ctx context.Context, cfg Config, note string) (Result, error) {
	b, a, err := memBroker()
	if err != nil {
		return Result{}, err
	}
	defer b.Close(context.Background())
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "bench.orders", Group: "bench", InFlight: cfg.InFlight})
	if err != nil {
		return Result{}, err
	}
	sentAt := make([]time.Time, cfg.N)
	lat := &Latencies{d: make([]time.Duration, 0, cfg.N)}
	ack := ports.Disposition{Action: ports.Ack}
	one := make([]*ports.Delivery, 1)
	var ids []int

	var m Meter
	m.Start()
	errc := memProducer(ctx, a, cfg, note, sentAt)
	for n := 0; n < cfg.N; {
		ds, err := sub.Receive(ctx, cfg.InFlight)
		if err != nil {
			return Result{}, fmt.Errorf("mem-spi: %d of %d received: %w", n, cfg.N, err)
		}
		ids = ids[:0]
		for _, d := range ds {
			var o benchOrder
			if err := json.Unmarshal(d.Payload, &o); err != nil {
				return Result{}, err
			}
			_ = mapLine(o)
			ids = append(ids, o.ID)
			if cfg.Batch > 0 {
				continue
			}
			one[0] = d
			if err := sub.Settle(ctx, one, ack); err != nil {
				return Result{}, err
			}
		}
		for i := 0; cfg.Batch > 0 && i < len(ds); i += cfg.Batch {
			if err := sub.Settle(ctx, ds[i:min(i+cfg.Batch, len(ds))], ack); err != nil {
				return Result{}, err
			}
		}
		for _, id := range ids {
			lat.Add(time.Since(sentAt[id]))
		}
		n += len(ds)
	}
	el, allocs := m.Stop(cfg.N)
	if err := <-errc; err != nil {
		return Result{}, fmt.Errorf("mem-spi: send: %w", err)
	}
	p50, p99 := lat.Percentiles()
	r := Result{Name: "mem-spi", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99, Note: "Receive/decode/map/Settle, no flow"}
	if cfg.Batch > 0 {
		r.Note += fmt.Sprintf(", settled in batches of %d", cfg.Batch)
	}
	return r, nil
}

func memBroker() (*mem.Broker, *mem.Adapter, error) {
	b, err := mem.NewBroker()
	if err != nil {
		return nil, nil, err
	}
	a, err := mem.New(b)
	if err != nil {
		return nil, nil, err
	}
	return b, a, nil
}

// orderID reads the id of a JSON-encoded benchOrder ({"id":N,...}) without
// decoding it again.
func orderID(payload []byte) int {
	const prefix = `{"id":`
	n := 0
	for _, c := range payload[min(len(prefix), len(payload)):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
