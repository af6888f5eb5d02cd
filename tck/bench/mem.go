package main

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The mem suite runs the same in-process work — encode a ~100-byte JSON
// reading, hand it off, decode, map, settle — through:
//
//	channel      best raw: json.Marshal → a buffered channel (capacity =
//	             in-flight) → json.Unmarshal → map → counted (the
//	             denominator); each message carries the envelope the
//	             flow.NewMessage and Send write (ports.Headers: content
//	             type, id), and
//	             the consumer checks its content type
//	channel-bare channel with the payload alone (RATIO mem/bare-raw)
//	mem          flow.Send-equivalent producer (one goroutine, one message
//	             per Send, unpaced) → adapters/mem → default pipeline
//	mem-batch    the same into the batch pipeline
//	watermill    Watermill's gochannel Pub/Sub (output buffer = in-flight)
//	             → Router → handler → ack
//	mem-latency  default pipeline with a producer paced at -rate
//
// Peak heap is printed for every contender: mem's queue is the buffer
// between an unpaced producer and the consumer.
func init() {
	t := target{open: openMem, publishers: 1, chunk: 1}
	register(Suite{
		Name:     "mem",
		About:    "in-process: encode → hand-off → decode → map → settle; producer runs concurrently and unpaced; timed from the first delivery",
		DefaultN: 300000,
		Contenders: append([]Contender{
			{Name: "channel", Run: runChannel(true)},
			{Name: "channel-bare", Run: runChannel(false)},
			{Name: "mem", Run: t.runPipeline(false)},
			{Name: "mem-batch", Run: t.runPipeline(true)},
			// Diagnostic: the default pipeline with rounds settled at once.
			{Name: "mem-linger0", Run: t.runPipeline(false, flow.WithSettleLinger(0))},
			{Name: "watermill-gochannel", Run: runGoChannel},
			{Name: "mem-latency", Latency: true, Run: t.runLatency()},
		}, profileContenders("mem", t)...),
		Ratios: append([]Ratio{
			{Label: "mem-linger0/best-raw", Num: "mem-linger0", Den: []string{"channel"}},
			{Label: "mem/best-raw", Num: "mem", Den: []string{"channel"}},
			{Label: "mem-batch/best-raw", Num: "mem-batch", Den: []string{"channel"}},
			{Label: "watermill-gochannel/best-raw", Num: "watermill-gochannel", Den: []string{"channel"}},
			{Label: "channel-bare/best-raw", Num: "channel-bare", Den: []string{"channel"}},
			{Label: "mem/bare-raw", Num: "mem", Den: []string{"channel-bare"}},
		}, profileRatios("mem", "channel")...),
	})
}

func openMem(_ context.Context, _ Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	b, err := mem.NewBroker()
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	a, err := mem.New(b)
	if err != nil {
		_ = b.Close(context.Background())
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	return a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, func() {
		_ = a.Close(context.Background())
		_ = b.Close(context.Background())
	}, nil
}

// chanMsg is what the channel contenders hand over: the payload and, for
// channel, the envelope headers.
type chanMsg struct {
	body    []byte
	headers ports.Headers
}

// runChannel is the best raw in-process configuration, the messages
// carrying the adapter's envelope when envelope.
func runChannel(envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, _ Env, cfg Config) (Result, error) {
		name, note := "channel", "json.Marshal → buffered chan → Unmarshal → map"
		if envelope {
			note += ", envelope headers"
		} else {
			name += "-bare"
			note += ", bare messages"
		}
		tl := newTally(cfg.N)
		m := newMeter(tl)
		ch := make(chan chanMsg, cfg.InFlight)
		consumed := make(chan error, 1)
		go func() {
			for msg := range ch {
				m.begin()
				if ct := msg.headers.Get(ports.HeaderContentType); envelope && ct != "application/json" {
					consumed <- fmt.Errorf("%s: content type %q", name, ct)
					return
				}
				i, err := handleJSON(msg.body)
				if err != nil {
					consumed <- err
					return
				}
				tl.mark(i)
			}
			consumed <- nil
		}()
		padding := pad(cfg.Payload)
		for i := range cfg.N {
			msg := chanMsg{body: encodeMsg(i, padding)}
			if envelope {
				msg.headers = ports.Headers{
					{Name: ports.HeaderContentType, Value: "application/json"}, {Name: ports.HeaderID, Value: ports.NewID()},
				}
			}
			select {
			case ch <- msg:
			case <-ctx.Done():
				return Result{}, ctx.Err()
			}
		}
		close(ch)
		if err := <-consumed; err != nil {
			return Result{}, err
		}
		res, err := m.finish(name)
		res.Note = note
		return res, err
	}
}

// runGoChannel is Watermill's in-process Pub/Sub under its Router.
func runGoChannel(ctx context.Context, _ Env, cfg Config) (Result, error) {
	logger := watermill.NopLogger{}
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: int64(cfg.InFlight)}, logger)
	defer ps.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	router.AddConsumerHandler("bench", "bench", ps, func(msg *message.Message) error {
		m.begin()
		i, err := handleJSON(msg.Payload)
		if err != nil {
			return err
		}
		tl.mark(i) // the ack follows the handler's return (in memory)
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(rctx) }()
	defer func() { _ = router.Close(); <-ran }()
	select {
	case <-router.Running():
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	produced := make(chan error, 1)
	go func() {
		padding := pad(cfg.Payload)
		for i := range cfg.N {
			if err := ps.Publish("bench", message.NewMessage(watermill.NewUUID(), encodeMsg(i, padding))); err != nil {
				produced <- fmt.Errorf("watermill publish: %w", err)
				return
			}
		}
		produced <- nil
	}()
	if err := waitAll(ctx, "watermill-gochannel", tl, produced); err != nil {
		return Result{}, err
	}
	res, err := m.finish("watermill-gochannel")
	res.Note = "gochannel Pub/Sub → Router → handler → ack"
	return res, err
}
