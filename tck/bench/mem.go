package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("mem", memSuite) }

// benchMsg is the workload's payload: a reading with its publish time.
type benchMsg struct {
	Device string  `json:"device"`
	Value  float64 `json:"value"`
	Pad    string  `json:"pad"`
	SentNS int64   `json:"sent_ns"`
}

type benchOut struct {
	Device string
	Scaled float64
	SentNS int64
}

// maxOutstanding is how far a producer may run ahead of settlement: the
// channel baseline's buffers hold this many, and adapter contenders pace
// their publisher to the same window.
func maxOutstanding(cfg Config) int { return 4 * max(cfg.InFlight, 16) }

func scale(m benchMsg) benchOut {
	return benchOut{Device: m.Device, Scaled: m.Value * 1.5, SentNS: m.SentNS}
}

func pad(n int) string {
	if n < 64 {
		return ""
	}
	b := make([]byte, n-64)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}

// memSuite runs the same publish → decode → map → settle work through the
// in-process adapter and through a plain channel pipeline.
func memSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	// Warm up both once so the first contender pays no one-off costs.
	small := cfg
	small.N = min(cfg.N, 2000)
	if _, err := runChannels(ctx, small); err != nil {
		return nil, nil, err
	}
	if _, err := runMem(ctx, small); err != nil {
		return nil, nil, err
	}
	results, err := rounds(ctx, cfg, runChannels, runMem)
	return results, []Ratio{{Label: "mem/channels", Num: "mem", Den: "channels"}}, err
}

func runMem(ctx context.Context, cfg Config) (Result, error) {
	b, err := mem.NewBroker()
	if err != nil {
		return Result{}, err
	}
	defer b.Close(context.Background())
	a, err := mem.New(b)
	if err != nil {
		return Result{}, err
	}
	spec := ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}
	var lat Latencies
	var done atomic.Int64
	finished := make(chan struct{})
	window := make(chan struct{}, maxOutstanding(cfg))
	p := flow.New(a, spec)
	out := flow.Map(flow.Decode[benchMsg](p.Source()), func(_ context.Context, m benchMsg) (benchOut, error) { return scale(m), nil })
	flow.Sink(out, func(_ context.Context, o benchOut) error {
		lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
		<-window
		if done.Add(1) == int64(cfg.N) {
			close(finished)
		}
		return nil
	})
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	padding := pad(cfg.Payload)
	var m Meter
	m.Start()
	for i := range cfg.N {
		select { // pace the producer as the channel baseline is paced
		case window <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		msg := benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()}
		if err := flow.Send(ctx, a, "bench", msg); err != nil {
			return Result{}, err
		}
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("mem: %d of %d settled: %w", done.Load(), cfg.N, ctx.Err())
	}
	for p.Stats().Acked < int64(cfg.N) { // the last acks trail the handler by a few instructions
		time.Sleep(50 * time.Microsecond)
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "mem", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "flow.Send → mem → Decode → Map → Sink → ACK"}, nil
}

// runChannels is the baseline: the same encode, decode, map and a settle
// counter over plain Go channels, one goroutine per stage.
func runChannels(ctx context.Context, cfg Config) (Result, error) {
	var lat Latencies
	// Buffers add up to maxOutstanding, the producer window of the adapter
	// contenders.
	raw := make(chan []byte, maxOutstanding(cfg)-32)
	decoded := make(chan benchMsg, 16)
	mapped := make(chan benchOut, 16)
	var settled atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(decoded)
		for b := range raw {
			var m benchMsg
			if err := json.Unmarshal(b, &m); err != nil {
				panic(err)
			}
			decoded <- m
		}
	}()
	go func() {
		defer close(mapped)
		for m := range decoded {
			mapped <- scale(m)
		}
	}()
	go func() {
		for o := range mapped {
			lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
			if settled.Add(1) == int64(cfg.N) {
				close(finished)
			}
		}
	}()
	padding := pad(cfg.Payload)
	var m Meter
	m.Start()
	for i := range cfg.N {
		b, err := json.Marshal(benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()})
		if err != nil {
			return Result{}, err
		}
		raw <- b
	}
	close(raw)
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "channels", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "json.Marshal → chan → Unmarshal → map → counter"}, nil
}
