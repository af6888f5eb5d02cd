package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
)

// The activemq suite, on a private ActiveMQ Classic broker (activemqtest)
// or the STOMP connector at $ACTIVEMQ_ADDR, messages persistent:
//
// consume + ack of N pre-published messages (timed from the first delivery):
//
//	raw-cumulative-ack  go-stomp, one connection,
//	                    activemq.prefetchSize = in-flight, ack:client, one
//	                    cumulative ACK every in-flight/2 deliveries (and
//	                    the last): in-order processing allows it
//	raw-individual-ack  ack:client-individual, one ACK per delivery (what
//	                    out-of-order settlement needs: STOMP has no
//	                    multiple-ack for it)
//	raw-individual-ack+env  the same, the messages carrying the headers the
//	                    adapter's carry (ce-id, content-type), which
//	                    ActiveMQ stores and delivers as JMS properties, and
//	                    taking the adapter's route: published to a virtual
//	                    topic, read from the group's consumer queue
//	                    (stompRoute)
//	activemq            sluice default pipeline
//	activemq-latency    default pipeline with a paced concurrent producer
//
// The consume denominator is raw-individual-ack+env, go-stomp reading the
// envelope the adapter reads (as on the other suites); activemq/bare-raw
// divides by the faster of the two bare contenders. Measured on ActiveMQ
// 5.17 (5,000 messages, in-flight 100), ack:client was about five times
// slower than ack:client-individual, acking every 50 or every 10
// deliveries alike, so the individual ack is the best raw configuration.
//
// confirmed publish of N messages to a consumer queue:
//
//	raw-publish-tx+env  best raw: go-stomp, 16 goroutines × transactions of
//	                    16 SENDs committed with a receipt, receipts
//	                    pipelined over 4 connections (the adapter's
//	                    default), each message carrying the adapter's
//	                    envelope, by its route (as raw-individual-ack+env's)
//	raw-publish-tx      the same with bare messages: activemq-publish/bare-raw
//	activemq-publish    Adapter.Send from 16 goroutines × 16 messages (one
//	                    transaction per Send, 4 publish connections)
//
// After its timed section a publish contender consumes its queue (untimed,
// stompDrain) and fails unless it held messages 0..N-1: the queue's depth
// check, and what keeps the broker's heap from filling with every publish
// run's messages (see stompDrain).
func init() {
	t := target{open: openActiveMQ, prepare: prepareActiveMQ, publishers: 4, chunk: 1}
	register(Suite{
		Name:     "activemq",
		About:    "consume suites pre-publish N persistent messages per run and time consume + ack from the first delivery",
		DefaultN: 10000,
		Setup:    setupActiveMQ,
		Contenders: []Contender{
			{Name: "raw-cumulative-ack", Run: runStompCumulative},
			{Name: "raw-individual-ack", Run: runStompConsume(false)},
			{Name: "raw-individual-ack+env", Run: runStompConsume(true)},
			{Name: "activemq", Run: t.runPipeline(false)},
			{Name: "raw-publish-tx+env", Run: runStompPublish(true)},
			{Name: "raw-publish-tx", Run: runStompPublish(false)},
			{Name: "activemq-publish", Run: runActiveMQPublish},
			{Name: "activemq-latency", Latency: true, Run: t.runLatency()},
		},
		Ratios: []Ratio{
			{Label: "activemq/best-raw", Num: "activemq", Den: []string{"raw-individual-ack+env"}},
			{Label: "activemq/bare-raw", Num: "activemq", Den: []string{"raw-cumulative-ack", "raw-individual-ack"}},
			{Label: "activemq-publish/best-raw", Num: "activemq-publish", Den: []string{"raw-publish-tx+env"}},
			{Label: "activemq-publish/bare-raw", Num: "activemq-publish", Den: []string{"raw-publish-tx"}},
		},
	})
}

const (
	amqPublishers = 16 // publish goroutines
	amqChunk      = 16 // messages per Send / per transaction
	amqConns      = 4  // publish connections (the adapter's default)
)

func setupActiveMQ(ctx context.Context, _ Config) (Env, func(), error) {
	if addr := os.Getenv("ACTIVEMQ_ADDR"); addr != "" {
		fmt.Println("broker: ACTIVEMQ_ADDR")
		return Env{"addr": addr}, func() {}, nil
	}
	// Pre-publishing N persistent messages to a queue nobody consumes yet
	// trips ActiveMQ's producer flow control (the queue's memory limit),
	// which blocks a transacted producer until a consumer drains it: the
	// bench broker turns it off for queues and lets them spool to KahaDB.
	// With it off a queue still caches messages in the broker's heap up to
	// its memory limit, which is, by default, 70% of the heap (256 MiB):
	// 100,000 of them filled it and the JVM failed with OutOfMemoryError,
	// its journal with it. 32 MiB a queue keeps the default N cached and
	// leaves the rest in KahaDB only.
	b, err := activemqtest.Start(ctx, activemqtest.Options{PolicyEntries: `<policyEntry queue=">" producerFlowControl="false" memoryLimit="32mb"/>`})
	if err != nil {
		return nil, nil, fmt.Errorf("no ACTIVEMQ_ADDR and no private ActiveMQ could start: %w", err)
	}
	fmt.Println("broker: private ActiveMQ 5.17 (activemqtest) on 127.0.0.1, STOMP, producerFlowControl=false, 32 MiB cached a queue")
	return Env{"addr": b.StompAddr, brokerPIDEnv: strconv.Itoa(b.PID())}, func() { b.Stop() }, nil
}

func amqNamespace(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
}

func openActiveMQ(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := activemq.New(ctx, activemq.Options{Addr: env["addr"], Namespace: amqNamespace("sluice"), PublishConns: amqConns, Logger: quiet})
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	return a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, func() { _ = a.Close(context.Background()) }, nil
}

// prepareActiveMQ makes the group's queue (Subscribe, then Stop: a
// virtual-topic consumer queue outlives its consumer) and publishes N.
func prepareActiveMQ(ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec, cfg Config) error {
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		return err
	}
	if err := sub.Stop(ctx); err != nil {
		return err
	}
	return prepublish(ctx, a, spec.Topic, cfg.N, 256, cfg.Payload)
}

// stompPublish sends payloads 0..n-1 to dest from amqPublishers goroutines
// in transactions of amqChunk SENDs, each committed with a receipt, over
// conns (receipts pipelined on each connection); confirmed(i) per message.
func stompPublish(ctx context.Context, conns []*stomp.Conn, dest string, n, payload int, envelope bool, confirmed func(int)) error {
	padding := pad(payload)
	var next, rr atomic.Int64
	errs := make(chan error, amqPublishers)
	var wg sync.WaitGroup
	for range amqPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				first := int(next.Add(amqChunk)) - amqChunk
				if first >= n {
					return
				}
				c := conns[int(rr.Add(1))%len(conns)]
				tx, err := c.BeginWithError()
				if err != nil {
					errs <- err
					return
				}
				last := min(first+amqChunk, n)
				for i := first; i < last; i++ {
					opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
					if envelope {
						opts = append(opts, stomp.SendOpt.Header(ports.HeaderID, ports.NewID()))
					}
					if err := tx.Send(dest, "application/json", encodeMsg(i, padding), opts...); err != nil {
						errs <- err
						return
					}
				}
				if err := tx.CommitWithReceipt(); err != nil {
					errs <- fmt.Errorf("commit: %w", err)
					return
				}
				for i := first; i < last; i++ {
					confirmed(i)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

func stompConns(addr string, k int) ([]*stomp.Conn, func(), error) {
	var conns []*stomp.Conn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Disconnect()
		}
	}
	for range k {
		c, err := stomp.Dial("tcp", addr, stomp.ConnOpt.Logger(stompWarnings{}))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
	}
	return conns, closeAll, nil
}

// stompWarnings keeps the raw contenders' go-stomp lines off the bench's
// output (go-stomp logs a line per subscription a closing connection
// ends), except its warnings and errors, which go to stderr.
type stompWarnings struct{}

func (stompWarnings) Debugf(string, ...any) {}
func (stompWarnings) Infof(string, ...any)  {}
func (stompWarnings) Debug(string)          {}
func (stompWarnings) Info(string)           {}
func (stompWarnings) Warningf(f string, v ...any) {
	fmt.Fprintf(os.Stderr, "go-stomp (raw contender): "+f+"\n", v...)
}
func (stompWarnings) Errorf(f string, v ...any) {
	fmt.Fprintf(os.Stderr, "go-stomp (raw contender): "+f+"\n", v...)
}
func (w stompWarnings) Warning(m string) { w.Warningf("%s", m) }
func (w stompWarnings) Error(m string)   { w.Errorf("%s", m) }

// runStompConsume pre-publishes N straight to a queue (with the
// adapter's headers when envelope), then consumes with prefetch =
// in-flight and one ACK per delivery.
func runStompConsume(envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		name := "raw-individual-ack"
		if envelope {
			name += "+env"
		}
		return stompConsume(ctx, env, cfg, name, envelope, false)
	}
}

// runStompCumulative consumes with ack:client, acking cumulatively.
func runStompCumulative(ctx context.Context, env Env, cfg Config) (Result, error) {
	return stompConsume(ctx, env, cfg, "raw-cumulative-ack", false, true)
}

// stompRoute returns where a raw contender publishes and the queue it
// reads. A bare contender publishes straight to the queue. One with the
// envelope takes the adapter's route as well: it publishes to a virtual
// topic, which ActiveMQ forwards to the group's consumer queue, so the
// broker does the same work and delivers the same frames
// (original-destination added) as to the sluice contenders. The queue is
// made first, as the adapter's Subscribe makes it: go-stomp's Unsubscribe
// waits for the broker's receipt, which it sends after the SUBSCRIBE
// before it on the connection, so the queue exists before the first
// publish.
func stompRoute(c *stomp.Conn, name string, envelope bool) (dest, queue string, err error) {
	topic := "VirtualTopic." + amqNamespace(name)
	queue = "/queue/Consumer.bench." + topic
	if !envelope {
		return queue, queue, nil
	}
	sub, err := c.Subscribe(queue, stomp.AckAuto)
	if err != nil {
		return "", "", err
	}
	if err := sub.Unsubscribe(); err != nil {
		return "", "", err
	}
	return "/topic/" + topic, queue, nil
}

// stompConsume pre-publishes N to a queue and consumes them with prefetch
// = in-flight: one ACK per delivery (ack:client-individual), or, when
// cumulative, one ACK (ack:client) every in-flight/2 deliveries and the
// last, each acknowledging everything delivered before it.
func stompConsume(ctx context.Context, env Env, cfg Config, name string, envelope, cumulative bool) (Result, error) {
	conns, closeAll, err := stompConns(env["addr"], amqConns)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	dest, queue, err := stompRoute(conns[0], "raw", envelope)
	if err != nil {
		return Result{}, err
	}
	if err := stompPublish(ctx, conns, dest, cfg.N, cfg.Payload, envelope, func(int) {}); err != nil {
		return Result{}, fmt.Errorf("pre-publish: %w", err)
	}
	c := conns[0]
	mode, every := stomp.AckClientIndividual, 1
	if cumulative {
		mode, every = stomp.AckClient, max(cfg.InFlight/2, 1)
	}
	sub, err := c.Subscribe(queue, mode, stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(cfg.InFlight)))
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	pending := make([]int, 0, every)
	for received := 0; received < cfg.N; received++ {
		var msg *stomp.Message
		var ok bool
		select {
		case msg, ok = <-sub.C:
		case <-ctx.Done():
			return Result{}, tl.wait(ctx, name)
		}
		if !ok || msg.Err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, errNotAll)
		}
		m.begin()
		i, err := handleJSON(msg.Body)
		if err != nil {
			return Result{}, err
		}
		pending = append(pending, i)
		if len(pending) < every && received+1 < cfg.N {
			continue
		}
		if err := c.Ack(msg); err != nil {
			return Result{}, fmt.Errorf("%s: ack: %w", name, err)
		}
		for _, j := range pending {
			tl.mark(j)
		}
		pending = pending[:0]
	}
	if cumulative {
		return finishNote(m, name, fmt.Sprintf("go-stomp: prefetch %d, ack:client, one cumulative ACK every %d deliveries", cfg.InFlight, every))
	}
	return finishNote(m, name, fmt.Sprintf("go-stomp: prefetch %d, ack:client-individual, one ACK per delivery", cfg.InFlight))
}

// runStompPublish: go-stomp transactions, receipts pipelined; with
// envelope each message carries the adapter's envelope.
func runStompPublish(envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		name, note := "raw-publish-tx", ""
		if envelope {
			name, note = name+"+env", ", the adapter's envelope"
		}
		conns, closeAll, err := stompConns(env["addr"], amqConns)
		if err != nil {
			return Result{}, err
		}
		defer closeAll()
		dest, queue, err := stompRoute(conns[0], "rawpub", envelope)
		if err != nil {
			return Result{}, err
		}
		tl := newTally(cfg.N)
		m := newMeter(tl)
		m.begin()
		if err := stompPublish(ctx, conns, dest, cfg.N, cfg.Payload, envelope, tl.mark); err != nil {
			return Result{}, err
		}
		res, err := finishNote(m, name, fmt.Sprintf("go-stomp: %d goroutines × %d SENDs per transaction, %d connections, persistent", amqPublishers, amqChunk, amqConns)+note)
		if err != nil {
			return Result{}, err
		}
		return res, stompDrain(ctx, env["addr"], queue, cfg.N)
	}
}

// stompDrain consumes the n messages a publish contender left in queue
// (ack:auto, after the timed section) and fails unless they are messages
// 0..n-1 (a redelivered one is skipped). Without it every publish run
// left its N messages in a queue nobody consumes, and with
// producerFlowControl off the broker keeps them in its heap: after a few
// runs the private broker (256 MiB of heap) ran out of memory, its KahaDB
// journal failed, and the next transaction's COMMIT — whichever
// contender's pre-publish it was — came back "STORE COMMIT FAILED:
// Transaction rolled back".
func stompDrain(ctx context.Context, addr, queue string, n int) error {
	c, err := stomp.Dial("tcp", addr, stomp.ConnOpt.Logger(stompWarnings{}))
	if err != nil {
		return err
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(queue, stomp.AckAuto, stomp.SubscribeOpt.Header("activemq.prefetchSize", "1000"))
	if err != nil {
		return err
	}
	seen := make([]bool, n)
	for distinct := 0; distinct < n; {
		select {
		case msg, ok := <-sub.C:
			if !ok || msg.Err != nil {
				return fmt.Errorf("drain %s: subscription ended after %d of %d messages", queue, distinct, n)
			}
			i, err := handleJSON(msg.Body)
			if err != nil {
				return fmt.Errorf("drain %s: %w", queue, err)
			}
			if i < 0 || i >= n {
				return fmt.Errorf("queue %s holds message %d, never published: the contender is broken, its figure is void", queue, i)
			}
			if !seen[i] {
				seen[i] = true
				distinct++
			}
		case <-ctx.Done():
			return fmt.Errorf("queue %s holds only %d of the %d messages confirmed: the contender is broken, its figure is void: %w", queue, distinct, n, ctx.Err())
		}
	}
	return nil // the deferred DISCONNECT ends the subscription
}

// runActiveMQPublish: Adapter.Send from amqPublishers goroutines ×
// amqChunk messages, to the group's queue.
func runActiveMQPublish(ctx context.Context, env Env, cfg Config) (Result, error) {
	ns := amqNamespace("sluicepub")
	a, err := activemq.New(ctx, activemq.Options{Addr: env["addr"], Namespace: ns, PublishConns: amqConns, Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	spec := ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}
	sub, err := a.Subscribe(ctx, spec) // makes the queue the messages reach
	if err != nil {
		return Result{}, err
	}
	if err := sub.Stop(ctx); err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	m.begin()
	if err := produce(ctx, a, spec.Topic, cfg.N, amqPublishers, amqChunk, cfg.Payload, 0, tl.mark); err != nil {
		return Result{}, fmt.Errorf("activemq-publish: %w", err)
	}
	res, err := finishNote(m, "activemq-publish", fmt.Sprintf("Adapter.Send: %d goroutines × %d messages (one transaction each), %d connections", amqPublishers, amqChunk, amqConns))
	if err != nil {
		return Result{}, err
	}
	// The group's queue on the virtual topic (docs/adapters/activemq.md).
	return res, stompDrain(ctx, env["addr"], "/queue/Consumer.bench.VirtualTopic."+ns+".bench", cfg.N)
}
