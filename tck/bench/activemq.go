package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("activemq", activemqSuite) }

// The activemq suite runs N persistent messages through ActiveMQ Classic
// over STOMP, two ways each:
//
//	activemq          this adapter: Send (amqPublishers goroutines, amqChunk
//	                  messages per Send: one transaction committed with a
//	                  receipt, spread over the adapter's publish
//	                  connections) → flow pipeline → Sink → ACK
//	raw               go-stomp by hand doing the same — the best raw
//	                  configuration: the same publishers, chunks and
//	                  publish connections (BEGIN, SEND×chunk persistent,
//	                  COMMIT with a receipt, receipts pipelined on each
//	                  connection), one consumer connection with the same
//	                  prefetch (activemq.prefetchSize) and
//	                  ack:client-individual, one ACK per message
//	raw+env           raw sending the headers the adapter sends (ce-id,
//	                  ce-specversion, ce-time), to separate the cost of the
//	                  envelope, which the broker stores as JMS properties,
//	                  from the cost of the adapter
//	activemq-publish  confirmed publish alone (adapter Send)
//	raw-publish       confirmed publish alone (go-stomp transactions)
//
// At most amqWindow(cfg) messages are published and not yet settled, so
// the queue stays short. The broker is $ACTIVEMQ_ADDR (a STOMP
// connector), or a private ActiveMQ started for the run (activemqtest).
func activemqSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	addr := os.Getenv("ACTIVEMQ_ADDR")
	if addr == "" {
		b, err := activemqtest.Start(ctx, activemqtest.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("activemq: no ACTIVEMQ_ADDR and no local ActiveMQ: %w", err)
		}
		defer b.Stop()
		addr = b.StompAddr
	}
	ab := &amqBench{addr: addr}
	contenders := []func(context.Context, Config) (Result, error){ab.runRaw, ab.runRawEnvelope, ab.runAdapter, ab.runRawPublish, ab.runAdapterPublish}
	ratios := []Ratio{
		{Label: "activemq/best-raw", Num: "activemq", Den: "raw"},
		{Label: "activemq/raw+env", Num: "activemq", Den: "raw+env"},
		{Label: "activemq-publish/raw-publish", Num: "activemq-publish", Den: "raw-publish"},
	}
	warm := cfg
	warm.N = min(cfg.N, 2000)
	for _, run := range contenders {
		if _, err := run(ctx, warm); err != nil {
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	results, err := rounds(ctx, cfg, contenders...)
	return results, ratios, err
}

const (
	amqChunk      = 16 // messages per Send / per transaction
	amqPublishers = 8  // producer goroutines
	amqConns      = 4  // publish connections (the adapter's default)
)

func amqWindow(cfg Config) int { return max(4*cfg.InFlight, 2*amqChunk*amqPublishers) }

type amqBench struct {
	addr string
	seq  atomic.Int64
}

func (b *amqBench) topic(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), b.seq.Add(1))
}

type amqMsg struct {
	Device string  `json:"device"`
	Value  float64 `json:"value"`
	Pad    string  `json:"pad,omitempty"`
	SentNS int64   `json:"sent_ns"`
}

// amqHandle is the one stage every contender runs: decode and map.
func amqHandle(body []byte, lat *Latencies) error {
	var m amqMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return ports.Poison(err)
	}
	_ = m.Value * 1.5
	lat.Add(time.Duration(time.Now().UnixNano() - m.SentNS))
	return nil
}

// amqProduce runs amqPublishers goroutines publishing cfg.N payloads in
// chunks of amqChunk, each payload taking a token from window (nil: none).
func amqProduce(ctx context.Context, cfg Config, window chan struct{}, publish func(ctx context.Context, payloads [][]byte) error) error {
	var next atomic.Int64
	padding := strings.Repeat("x", max(cfg.Payload-60, 0))
	errs := make(chan error, amqPublishers)
	var wg sync.WaitGroup
	for range amqPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(amqChunk)) - amqChunk
				if start >= cfg.N {
					return
				}
				n := min(amqChunk, cfg.N-start)
				payloads := make([][]byte, n)
				for i := range n {
					if window != nil {
						select {
						case window <- struct{}{}:
						case <-ctx.Done():
							errs <- ctx.Err()
							return
						}
					}
					payloads[i], _ = json.Marshal(amqMsg{Device: "dev", Value: float64(start + i), Pad: padding, SentNS: time.Now().UnixNano()})
				}
				if err := publish(ctx, payloads); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// amqTally counts settlements and releases window tokens.
type amqTally struct {
	n        int
	window   chan struct{}
	done     atomic.Int64
	finished chan struct{}
}

func newAmqTally(cfg Config) *amqTally {
	return &amqTally{n: cfg.N, window: make(chan struct{}, amqWindow(cfg)), finished: make(chan struct{})}
}

func (t *amqTally) settled(n int) {
	for range n {
		<-t.window
	}
	if t.done.Add(int64(n)) == int64(t.n) {
		close(t.finished)
	}
}

func (t *amqTally) wait(ctx context.Context, name string) error {
	select {
	case <-t.finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %d of %d settled: %w", name, t.done.Load(), t.n, ctx.Err())
	}
}

func (b *amqBench) adapter(ctx context.Context, name string) (*activemq.Adapter, error) {
	return activemq.New(ctx, activemq.Options{Addr: b.addr, Namespace: b.topic(name), PublishConns: amqConns})
}

func amqMessages(payloads [][]byte) []ports.Message {
	msgs := make([]ports.Message, len(payloads))
	for i, pl := range payloads {
		msgs[i] = ports.Message{Topic: "bench", Payload: pl, Headers: ports.Headers{ports.HeaderContentType: "application/json"}}
	}
	return msgs
}

// runAdapter: Send → flow → Sink → ACK.
func (b *amqBench) runAdapter(ctx context.Context, cfg Config) (Result, error) {
	a, err := b.adapter(ctx, "activemq")
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	var lat Latencies
	t := newAmqTally(cfg)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, flow.WithDrainTimeout(0))
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		if err := amqHandle(d.Payload, &lat); err != nil {
			return err
		}
		t.settled(1)
		return nil
	}, flow.Workers(cfg.InFlight))
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	var m Meter
	m.Start()
	if err := amqProduce(ctx, cfg, t.window, func(ctx context.Context, pls [][]byte) error { return a.Send(ctx, amqMessages(pls)...) }); err != nil {
		return Result{}, err
	}
	if err := t.wait(ctx, "activemq"); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "activemq", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "Send (tx+receipt) → flow → Sink → ACK"}, nil
}

// runAdapterPublish: confirmed Send alone.
func (b *amqBench) runAdapterPublish(ctx context.Context, cfg Config) (Result, error) {
	a, err := b.adapter(ctx, "activemq-publish")
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	// The group's queue exists (and stores every message), as in the
	// pipeline run.
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "bench", Group: "bench"})
	if err != nil {
		return Result{}, err
	}
	if err := sub.Stop(ctx); err != nil {
		return Result{}, err
	}
	var m Meter
	m.Start()
	if err := amqProduce(ctx, cfg, nil, func(ctx context.Context, pls [][]byte) error { return a.Send(ctx, amqMessages(pls)...) }); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	return Result{Name: "activemq-publish", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
		Note: fmt.Sprintf("Send of %d per transaction, %d connections", amqChunk, amqConns)}, nil
}

// amqRawPublisher publishes chunks as transactions over amqConns
// connections, receipts pipelined.
type amqRawPublisher struct {
	conns    []*stomp.Conn
	next     atomic.Uint64
	dest     string
	envelope bool
}

func (b *amqBench) rawPublisher(dest string) (*amqRawPublisher, error) {
	p := &amqRawPublisher{dest: dest}
	for range amqConns {
		c, err := stomp.Dial("tcp", b.addr)
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

func (p *amqRawPublisher) publish(_ context.Context, payloads [][]byte) error {
	c := p.conns[p.next.Add(1)%uint64(len(p.conns))]
	tx, err := c.BeginWithError()
	if err != nil {
		return err
	}
	for _, pl := range payloads {
		opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
		if p.envelope {
			opts = append(opts, stomp.SendOpt.Header(ports.HeaderID, ports.NewID()),
				stomp.SendOpt.Header(ports.HeaderSpecVersion, "1.0"),
				stomp.SendOpt.Header(ports.HeaderTime, time.Now().UTC().Format(time.RFC3339Nano)))
		}
		if err := tx.Send(p.dest, "application/json", pl, opts...); err != nil {
			return err
		}
	}
	return tx.CommitWithReceipt()
}

func (p *amqRawPublisher) close() {
	for _, c := range p.conns {
		_ = c.Disconnect()
	}
}

// runRaw: go-stomp publishing as the adapter does, one consumer
// connection, one ACK per message.
func (b *amqBench) runRaw(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw", false)
}

// runRawEnvelope is runRaw sending the adapter's envelope headers.
func (b *amqBench) runRawEnvelope(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw+env", true)
}

func (b *amqBench) rawRun(ctx context.Context, cfg Config, label string, envelope bool) (Result, error) {
	name := b.topic("raw")
	queue := "/queue/Consumer.bench.VirtualTopic." + name
	cc, err := stomp.Dial("tcp", b.addr)
	if err != nil {
		return Result{}, err
	}
	defer cc.Disconnect()
	sub, err := cc.Subscribe(queue, stomp.AckClientIndividual, stomp.SubscribeOpt.Header("activemq.prefetchSize", fmt.Sprint(cfg.InFlight)))
	if err != nil {
		return Result{}, err
	}
	if tx, err := cc.BeginWithError(); err != nil || tx.AbortWithReceipt() != nil { // the queue exists
		return Result{}, errors.Join(errors.New("raw: subscribe barrier failed"), err)
	}
	pub, err := b.rawPublisher("/topic/VirtualTopic." + name)
	if err != nil {
		return Result{}, err
	}
	pub.envelope = envelope
	defer pub.close()
	var lat Latencies
	t := newAmqTally(cfg)
	consumed := make(chan error, 1)
	go func() {
		for {
			select {
			case m, ok := <-sub.C:
				if !ok || m.Err != nil {
					consumed <- fmt.Errorf("raw: subscription ended: %v", m)
					return
				}
				if err := amqHandle(m.Body, &lat); err != nil {
					consumed <- err
					return
				}
				if err := cc.Ack(m); err != nil {
					consumed <- err
					return
				}
				t.settled(1)
			case <-t.finished:
				consumed <- nil
				return
			}
		}
	}()
	var m Meter
	m.Start()
	if err := amqProduce(ctx, cfg, t.window, pub.publish); err != nil {
		return Result{}, err
	}
	select {
	case err := <-consumed:
		if err != nil {
			return Result{}, err
		}
	case <-ctx.Done():
		return Result{}, fmt.Errorf("raw: %d of %d settled: %w", t.done.Load(), cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: label, Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "go-stomp tx+receipt publish, client-individual ACK, same prefetch"}, nil
}

// runRawPublish: go-stomp transactions alone.
func (b *amqBench) runRawPublish(ctx context.Context, cfg Config) (Result, error) {
	name := b.topic("raw-publish")
	// The consumer queue exists (and stores every message), as in the
	// pipeline run.
	cc, err := stomp.Dial("tcp", b.addr)
	if err != nil {
		return Result{}, err
	}
	if _, err := cc.Subscribe("/queue/Consumer.bench.VirtualTopic."+name, stomp.AckClientIndividual); err != nil {
		return Result{}, err
	}
	if err := cc.Disconnect(); err != nil { // after the broker processed the SUBSCRIBE
		return Result{}, err
	}
	pub, err := b.rawPublisher("/topic/VirtualTopic." + name)
	if err != nil {
		return Result{}, err
	}
	defer pub.close()
	var m Meter
	m.Start()
	if err := amqProduce(ctx, cfg, nil, pub.publish); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	return Result{Name: "raw-publish", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs,
		Note: fmt.Sprintf("go-stomp, %d per transaction, %d connections", amqChunk, amqConns)}, nil
}
