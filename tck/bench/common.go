package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// benchMsg is the workload's payload (~100 bytes of JSON): a reading.
type benchMsg struct {
	Device string  `json:"device"`
	Value  float64 `json:"value"` // the message's index, 0..N-1
	Pad    string  `json:"pad"`
}

type benchOut struct {
	Device string
	Scaled float64
}

// scale is the one stage of work every contender does after decoding.
func scale(m benchMsg) benchOut { return benchOut{Device: m.Device, Scaled: m.Value * 1.5} }

// handleJSON is the raw contenders' handler: decode, map, and return the
// message's index.
func handleJSON(body []byte) (int, error) {
	var m benchMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return -1, err
	}
	_ = scale(m)
	return int(m.Value), nil
}

func pad(n int) string {
	if n < 48 {
		return ""
	}
	b := make([]byte, n-48)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}

// encodeMsg is the JSON payload of message i.
func encodeMsg(i int, padding string) []byte {
	b, err := json.Marshal(benchMsg{Device: "dev-" + strconv.Itoa(i%64), Value: float64(i), Pad: padding})
	if err != nil {
		panic(err) // a struct of strings and a float always encodes
	}
	return b
}

// benchMessage is message i as the sluice contenders publish it, made
// the way an application makes a message (flow.NewMessage: JSON payload,
// content type, id) and, when stamp is set (a latency contender's, whose
// observer sees no payload), the index in seqHeader and the send time in
// sentHeader. Every other contender reads the index from the payload, so
// a throughput message carries sluice's envelope and nothing of the
// bench's; the raw contenders' envelope (enveloped, envelopeFields, ...)
// carries the same headers.
func benchMessage(topic ports.Topic, i int, padding string, stamp bool) ports.Message {
	m, err := flow.NewMessage(context.Background(), topic, benchMsg{Device: "dev-" + strconv.Itoa(i%64), Value: float64(i), Pad: padding})
	if err != nil {
		panic(err) // a struct of strings and a float always encodes
	}
	if stamp {
		m.Headers.Set(seqHeader, strconv.Itoa(i))
		m.Headers.Set(sentHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	}
	return m
}

// target is how the generic sluice contenders of a suite reach its broker.
type target struct {
	// open returns an adapter and the subscription to consume; close
	// releases them. Called once per contender run.
	open func(ctx context.Context, env Env, cfg Config) (a ports.Adapter, spec ports.SubscriptionSpec, close func(), err error)
	// openLatency, if set, replaces open for the latency contender (e.g.
	// to consume a fresh topic rather than a pre-published one).
	openLatency func(ctx context.Context, env Env, cfg Config) (a ports.Adapter, spec ports.SubscriptionSpec, close func(), err error)
	// prepare, if set, publishes cfg.N messages (benchMessage 0..N-1)
	// that spec will receive, before the timed section.
	prepare func(ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec, cfg Config) error
	// prepublished says the suite's Setup already published the N
	// messages spec receives (a fresh group reads them all): neither
	// prepare nor the concurrent producer runs.
	prepublished bool
	// publishers and chunk shape the concurrent producer used when
	// prepare is nil: that many goroutines, each Send carrying chunk
	// messages (defaults 1 and 1).
	publishers, chunk int
	// batchMsgs: the batch pipeline hands its handler the deliveries
	// (Batched.Msgs), as operators.Batch does without ValuesOnly.
	batchMsgs bool
}

// prepublish sends messages 0..n-1 in confirmed Sends of chunk.
func prepublish(ctx context.Context, s ports.Sender, topic ports.Topic, n, chunk, payload int) error {
	padding := pad(payload)
	batch := make([]ports.Message, 0, chunk)
	for i := range n {
		batch = append(batch, benchMessage(topic, i, padding, false))
		if len(batch) == chunk || i == n-1 {
			if err := s.Send(ctx, batch...); err != nil {
				return fmt.Errorf("pre-publish: %w", err)
			}
			batch = batch[:0]
		}
	}
	return nil
}

// produce publishes messages 0..n-1 from publishers goroutines, chunk per
// Send, each message made (benchMessage) just before its Send, and calls
// confirmed, when not nil, with the index of each message its Send
// confirmed. With rate > 0 message i is sent no earlier than i/rate
// seconds after the start, stamped with its send time.
func produce(ctx context.Context, s ports.Sender, topic ports.Topic, n, publishers, chunk, payload, rate int, confirmed func(int)) error {
	padding := pad(payload)
	publishers, chunk = max(publishers, 1), max(chunk, 1)
	var next atomic.Int64
	start := time.Now()
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]ports.Message, 0, chunk)
			for {
				first := int(next.Add(int64(chunk))) - chunk
				if first >= n {
					return
				}
				batch = batch[:0]
				for i := first; i < min(first+chunk, n); i++ {
					if rate > 0 {
						if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
							time.Sleep(d) // pacing the producer, not synchronisation
						}
					}
					batch = append(batch, benchMessage(topic, i, padding, rate > 0))
				}
				if err := s.Send(ctx, batch...); err != nil {
					errs <- fmt.Errorf("publish: %w", err)
					return
				}
				if confirmed != nil {
					for i := first; i < first+len(batch); i++ {
						confirmed(i)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runPipeline is the sluice contender: flow.New → flow.Decode → flow.Sink
// (one worker), or with batch flow.Decode → operators.Batch(cfg.Batch,
// 5ms window, ValuesOnly unless t.batchMsgs) → flow.Sink; the handler
// maps each message and marks its index (the payload's value) in the
// tally, as the raw contenders' handlers do. The clock starts at the
// first message handled and stops once the pipeline has settled every
// message handled (WaitSettled, after the adapter's Settle accepted the
// last); the run is void unless they are ACKs of N distinct messages. The
// pipeline has no observer: a user's default pipeline has none, and an
// observer sees every delivery (which keeps the pipeline from reusing
// them, see flow's recycling).
//
// opts are extra pipeline options (for diagnostic contenders, e.g. a
// different settle linger).
func (t target) runPipeline(batch bool, opts ...flow.Option) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		a, spec, closeFn, err := t.open(ctx, env, cfg)
		if err != nil {
			return Result{}, err
		}
		defer closeFn()
		if t.prepare != nil {
			if err := t.prepare(ctx, a, spec, cfg); err != nil {
				return Result{}, err
			}
		}
		tl := newTally(cfg.N)
		m := newMeter(tl)
		p := flow.New(a, spec, opts...)
		decoded := flow.Decode[benchMsg](p.Source())
		if batch {
			flow.Sink(operators.Batch(decoded, operators.BatchOptions{Size: cfg.Batch, Window: 5 * time.Millisecond, ValuesOnly: !t.batchMsgs}),
				func(_ context.Context, b operators.Batched[benchMsg]) error {
					m.begin()
					for _, v := range b.Values {
						_ = scale(v)
						tl.mark(int(v.Value))
					}
					return nil
				})
		} else {
			flow.Sink(decoded, func(_ context.Context, v benchMsg) error {
				m.begin()
				_ = scale(v)
				tl.mark(int(v.Value))
				return nil
			})
		}
		if err := p.Start(ctx); err != nil {
			return Result{}, err
		}
		defer p.Stop(context.Background())
		produced := make(chan error, 1)
		if t.prepare == nil && !t.prepublished {
			go func() { produced <- produce(ctx, a, spec.Topic, cfg.N, t.publishers, t.chunk, cfg.Payload, 0, nil) }()
		}
		if err := waitAll(ctx, "sluice", tl, produced); err != nil {
			return Result{}, err
		}
		// Every message handled (redeliveries too) is settled before the
		// clock stops.
		if err := p.WaitSettled(ctx, int64(cfg.N)+tl.dups.Load()); err != nil {
			return Result{}, fmt.Errorf("sluice: handled all %d, settled fewer: %w", cfg.N, err)
		}
		res, err := m.finish("sluice")
		if err != nil {
			return Result{}, err
		}
		if st := p.Stats(); st.Acked < int64(cfg.N) || st.Requeued != 0 || st.DeadLettered != 0 {
			return Result{}, fmt.Errorf("sluice: %d acked, %d requeued, %d dead-lettered, want %d acked and nothing else: the contender is broken, its figure is void", st.Acked, st.Requeued, st.DeadLettered, cfg.N)
		}
		calls := float64(cfg.N) / float64(max(p.Stats().SettleCalls, 1))
		res.Note = fmt.Sprintf("flow.New → Decode → Sink, 1 worker, in-flight %d; %.1f msgs per Settle", spec.InFlight, calls)
		if batch {
			shape := "ValuesOnly"
			if t.batchMsgs {
				shape = "with Msgs"
			}
			res.Note = fmt.Sprintf("flow.New → Decode → operators.Batch(%d, 5ms, %s) → Sink; %.1f msgs per Settle", cfg.Batch, shape, calls)
		}
		return res, nil
	}
}

// runLatency is the default sluice pipeline with a concurrent producer
// paced at cfg.Rate: each message carries its send time, and its latency
// is taken when the observer reports its ACK accepted.
func (t target) runLatency(opts ...flow.Option) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		open := t.open
		if t.openLatency != nil {
			open = t.openLatency
		}
		a, spec, closeFn, err := open(ctx, env, cfg)
		if err != nil {
			return Result{}, err
		}
		defer closeFn()
		n := cfg.LatencyN
		tl := newTally(n)
		var lat Latencies
		ready := make(chan struct{})
		var once sync.Once
		p := flow.New(a, spec, append([]flow.Option{flow.WithObserver(func(e flow.Event) {
			if e.Action != ports.Ack {
				return
			}
			if e.Delivery.Headers.Get(seqHeader) == "warm" {
				once.Do(func() { close(ready) })
				return
			}
			lat.AddSince(e.Delivery.Headers)
			tl.markHeaders(e.Delivery.Headers)
		})}, opts...)...)
		flow.Sink(flow.Decode[benchMsg](p.Source()), func(_ context.Context, v benchMsg) error { _ = scale(v); return nil })
		if err := p.Start(ctx); err != nil {
			return Result{}, err
		}
		defer p.Stop(context.Background())
		// One message through first, so the subscription is live (group
		// joined, shared subscription made) before latencies are taken.
		warm := benchMessage(spec.Topic, 0, "", false)
		warm.Headers.Set(seqHeader, "warm")
		if err := a.Send(ctx, warm); err != nil {
			return Result{}, fmt.Errorf("warm-up message: %w", err)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return Result{}, fmt.Errorf("sluice-latency: the warm-up message was never settled: %w", ctx.Err())
		}
		m := newMeter(tl)
		m.begin()
		produced := make(chan error, 1)
		go func() { produced <- produce(ctx, a, spec.Topic, n, 4, 1, cfg.Payload, cfg.Rate, nil) }()
		if err := waitAll(ctx, "sluice-latency", tl, produced); err != nil {
			return Result{}, err
		}
		res, err := m.finish("sluice-latency")
		if err != nil {
			return Result{}, err
		}
		res.P50, res.P99 = lat.Percentiles()
		res.Note = fmt.Sprintf("default pipeline; publish (4 goroutines, paced) → settle accepted; settle linger %v", flow.DefaultSettleLinger)
		return res, nil
	}
}

// waitAll waits for the tally to complete, failing early if the producer
// (when there is one) fails.
func waitAll(ctx context.Context, name string, tl *tally, produced <-chan error) error {
	for {
		select {
		case err := <-produced:
			if err != nil {
				return err
			}
			produced = nil
		case <-tl.done:
			return nil
		case <-ctx.Done():
			return tl.wait(ctx, name)
		}
	}
}

// errNotAll is returned by raw consumers stopped before finishing.
var errNotAll = errors.New("consumer stopped before every message was settled")

// quiet discards adapters' start-up lines, which would interleave with
// the results.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
