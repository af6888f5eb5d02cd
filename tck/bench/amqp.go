package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The amqp suite, on a private RabbitMQ node (rabbittest) or $AMQP_URL,
// every queue a durable quorum queue (the adapter's default), messages
// persistent:
//
// consume + ack of N pre-published messages (timed from the first delivery):
//
//	raw-multiack      best raw: amqp091-go, prefetch = in-flight, one
//	                  multiple-ack every -k deliveries (the denominator)
//	raw-single-ack    weaker: one ack per delivery
//	raw-multiack-bare raw-multiack over bare messages (body and content
//	                  type only): less for the client to read than the
//	                  envelope every other consume contender reads
//	amqp, amqp-batch  sluice default and batch pipelines (RATIO amqp/best-raw
//	                  against raw-multiack, RATIO amqp/bare-raw against
//	                  raw-multiack-bare)
//	watermill         Watermill router over watermill-amqp's durable queue
//	                  config with prefetch = in-flight
//	amqp-latency      default pipeline with a paced concurrent producer
//
// confirmed publish of N messages to a bound queue (the queue's depth is
// checked to be N afterwards):
//
//	raw-publish-4096    best raw: amqp091-go, one channel, 4096 outstanding
//	                    confirms (the adapter's default confirm window),
//	                    each message the adapter's envelope (enveloped)
//	raw-publish-256     weaker: the same with 256 outstanding confirms
//	raw-publish-4096-bare  raw-publish-4096 with bare messages (body and
//	                    content type): RATIO amqp-publish/bare-raw
//	amqp-publish        Adapter.Send from 16 goroutines × 16 messages
//	amqp-publish-1send  one Adapter.Send of all N
//
// Every publisher makes and encodes each message inside its timed section
// (the raw ones with json.Marshal, the adapter's with flow.NewMessage).
//
// Every contender but the two bare ones reads or writes the same messages:
// the raw ones are published with the properties and headers the adapter
// writes for the same benchMessage (see enveloped), so the client library
// and the broker handle the same frames for each.
func init() {
	t := target{open: openAMQP, prepare: prepareAMQP}
	register(Suite{
		Name:     "amqp",
		About:    "consume suites pre-publish N persistent messages per run and time consume + ack from the first delivery",
		DefaultN: 30000,
		Setup:    setupAMQP,
		Contenders: append([]Contender{
			{Name: "raw-multiack", Run: runRawMultiAck},
			{Name: "raw-single-ack", Run: runRawSingleAck},
			{Name: "raw-multiack-bare", Run: runRawMultiAckBare},
			{Name: "amqp", Run: t.runPipeline(false)},
			{Name: "amqp-batch", Run: t.runPipeline(true)},
			// Diagnostic: the default pipeline with rounds settled at once.
			{Name: "amqp-linger0", Run: t.runPipeline(false, flow.WithSettleLinger(0))},
			{Name: "watermill", Run: runAMQPWatermill},
			{Name: "raw-publish-4096", Run: runRawPublish(4096)},
			{Name: "raw-publish-256", Run: runRawPublish(256)},
			{Name: "raw-publish-4096-bare", Run: runRawPublishBare(4096)},
			{Name: "amqp-publish", Run: runAdapterPublish("amqp-publish", 16, 16)},
			{Name: "amqp-publish-1send", Run: runAdapterPublish("amqp-publish-1send", 1, 0)},
			{Name: "amqp-publish-16x256", Run: runAdapterPublish("amqp-publish-16x256", 16, 256)},
			{Name: "amqp-latency", Latency: true, Run: t.runLatency()},
		}, profileContenders("amqp", t)...),
		Ratios: append([]Ratio{
			{Label: "amqp/best-raw", Num: "amqp", Den: []string{"raw-multiack"}},
			{Label: "amqp-batch/best-raw", Num: "amqp-batch", Den: []string{"raw-multiack"}},
			{Label: "amqp-linger0/best-raw", Num: "amqp-linger0", Den: []string{"raw-multiack"}},
			{Label: "watermill/best-raw", Num: "watermill", Den: []string{"raw-multiack"}},
			{Label: "raw-single-ack/best-raw", Num: "raw-single-ack", Den: []string{"raw-multiack"}},
			{Label: "raw-multiack-bare/best-raw", Num: "raw-multiack-bare", Den: []string{"raw-multiack"}},
			// sluice (its envelope read and written) against the raw client
			// reading bare messages: what a user comparing with raw
			// amqp091 over their own messages sees.
			{Label: "amqp/bare-raw", Num: "amqp", Den: []string{"raw-multiack-bare"}},
			{Label: "amqp-publish/best-raw", Num: "amqp-publish", Den: []string{"raw-publish-4096", "raw-publish-256"}},
			{Label: "amqp-publish-1send/best-raw", Num: "amqp-publish-1send", Den: []string{"raw-publish-4096", "raw-publish-256"}},
			{Label: "amqp-publish/raw-publish-256", Num: "amqp-publish", Den: []string{"raw-publish-256"}},
			// The same at most 4096 unconfirmed publishes as the best raw
			// configuration keeps (16 Sends of 256 in flight).
			{Label: "amqp-publish-16x256/best-raw", Num: "amqp-publish-16x256", Den: []string{"raw-publish-4096", "raw-publish-256"}},
			{Label: "amqp-publish/bare-raw", Num: "amqp-publish", Den: []string{"raw-publish-4096-bare"}},
		}, profileRatios("amqp", "raw-multiack")...),
	})
}

func setupAMQP(ctx context.Context, _ Config) (Env, func(), error) {
	if url := os.Getenv("AMQP_URL"); url != "" {
		fmt.Println("broker: AMQP_URL")
		return Env{"url": url}, func() {}, nil
	}
	node, err := rabbittest.Start(ctx, rabbittest.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("no AMQP_URL and no private RabbitMQ node could start: %w", err)
	}
	fmt.Println("broker: private RabbitMQ node (rabbittest) on 127.0.0.1")
	return Env{"url": node.URL, brokerPIDEnv: strconv.Itoa(node.PID())}, func() { node.Stop() }, nil
}

// amqpNamespace gives every run its own exchanges and queues.
func amqpNamespace(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
}

func openAMQP(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := amqp.New(ctx, amqp.Options{URL: env["url"], Namespace: amqpNamespace("sluice"), Logger: quiet})
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	return a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, func() { _ = a.Close(context.Background()) }, nil
}

// prepareAMQP declares the subscription's queue (Subscribe, then Stop:
// a load-balanced queue outlives its consumer) and publishes N to it.
func prepareAMQP(ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec, cfg Config) error {
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		return err
	}
	if err := sub.Stop(ctx); err != nil {
		return err
	}
	return prepublish(ctx, a, spec.Topic, cfg.N, 256, cfg.Payload)
}

// rawQueue declares a direct exchange and a durable quorum queue bound
// under "bench", as the adapter's topology does.
func rawQueue(ch *amqp091.Channel, ns string) (exchange, queue string, err error) {
	exchange, queue = ns+".topics", ns+"/bench"
	if err := ch.ExchangeDeclare(exchange, amqp091.ExchangeDirect, true, false, false, false, nil); err != nil {
		return "", "", err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		return "", "", err
	}
	return exchange, queue, ch.QueueBind(queue, "bench", exchange, false, nil)
}

// rawPublish publishes messages 0..n-1 on one confirm-mode channel with
// up to window confirms outstanding, calling confirmed(i) for each ack.
// Every publish is mandatory, as the adapter's are: a message no queue
// took comes back (basic.return) and fails the run rather than being
// counted as published.
func rawPublish(ctx context.Context, conn *amqp091.Connection, exchange, key string, n, window, payload int, publishing func([]byte, int) amqp091.Publishing, confirmed func(int)) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, window+1))
	// Unbuffered: amqp091 hands a basic.return over before the confirm of
	// the same message, so the loop below sees the return first.
	returns := ch.NotifyReturn(make(chan amqp091.Return))
	slots := make(chan struct{}, window)
	done := make(chan error, 1)
	go func() {
		// Reads both channels until the channel closes (after an error
		// too: amqp091 blocks on a notification nobody reads), reporting
		// the first error or the n-th confirm on done.
		var got int
		var returned error
		report := func(err error) {
			select {
			case done <- err:
			default:
			}
		}
		for confirms != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
				} else if returned == nil {
					returned = fmt.Errorf("publish returned by the broker: %s (%s → %s)", r.ReplyText, r.Exchange, r.RoutingKey)
				}
			case c, ok := <-confirms:
				switch {
				case !ok:
					confirms = nil
					report(fmt.Errorf("confirm channel closed after %d of %d confirms", got, n))
				case returned != nil:
					report(returned)
				case !c.Ack:
					report(fmt.Errorf("publish %d nacked by the broker", c.DeliveryTag))
				default:
					confirmed(int(c.DeliveryTag) - 1)
					<-slots
					if got++; got == n {
						report(nil)
					}
				}
			}
		}
	}()
	padding := pad(payload)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ch.PublishWithContext(ctx, exchange, key, true, false, publishing(encodeMsg(i, padding), i)); err != nil {
			return err
		}
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func persistent(body []byte, _ int) amqp091.Publishing {
	return amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent, ContentType: "application/json"}
}

// enveloped is the publishing the amqp adapter writes for benchMessage
// i: the message id and content type as properties, persistent (the
// adapter writes no header-table entry for them).
func enveloped(body []byte, _ int) amqp091.Publishing {
	return amqp091.Publishing{
		Body: body, DeliveryMode: amqp091.Persistent, ContentType: "application/json",
		MessageId: ports.NewID(),
	}
}

func runRawMultiAck(ctx context.Context, env Env, cfg Config) (Result, error) {
	return rawConsume(ctx, env, cfg, "raw-multiack", cfg.K, enveloped)
}

func runRawSingleAck(ctx context.Context, env Env, cfg Config) (Result, error) {
	return rawConsume(ctx, env, cfg, "raw-single-ack", 1, enveloped)
}

func runRawMultiAckBare(ctx context.Context, env Env, cfg Config) (Result, error) {
	res, err := rawConsume(ctx, env, cfg, "raw-multiack-bare", cfg.K, persistent)
	res.Note += ", bare messages"
	return res, err
}

// rawConsume pre-publishes N (each built by publishing), then consumes
// with prefetch = in-flight and one multiple-ack every k deliveries (and
// one for the tail).
func rawConsume(ctx context.Context, env Env, cfg Config, name string, k int, publishing func([]byte, int) amqp091.Publishing) (Result, error) {
	conn, err := amqp091.Dial(env["url"])
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return Result{}, err
	}
	exchange, queue, err := rawQueue(ch, amqpNamespace(name))
	if err != nil {
		return Result{}, err
	}
	defer func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	}()
	if err := rawPublish(ctx, conn, exchange, "bench", cfg.N, 256, cfg.Payload, publishing, func(int) {}); err != nil {
		return Result{}, fmt.Errorf("pre-publish: %w", err)
	}
	cch, err := conn.Channel()
	if err != nil {
		return Result{}, err
	}
	defer cch.Close()
	if err := cch.Qos(cfg.InFlight, 0, false); err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	deliveries, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return Result{}, err
	}
	pending := make([]int, 0, k)
	received := 0
	for received < cfg.N {
		var d amqp091.Delivery
		var ok bool
		select {
		case d, ok = <-deliveries:
		case <-ctx.Done():
			return Result{}, tl.wait(ctx, name)
		}
		if !ok {
			return Result{}, fmt.Errorf("%s: %w", name, errNotAll)
		}
		m.begin()
		i, err := handleJSON(d.Body)
		if err != nil {
			return Result{}, err
		}
		received++
		pending = append(pending, i)
		if len(pending) == k || received == cfg.N {
			if err := cch.Ack(d.DeliveryTag, k > 1); err != nil {
				return Result{}, fmt.Errorf("%s: ack: %w", name, err)
			}
			for _, i := range pending {
				tl.mark(i)
			}
			pending = pending[:0]
		}
	}
	note := fmt.Sprintf("amqp091: prefetch %d, one multiple-ack every %d", cfg.InFlight, k)
	if k == 1 {
		note = fmt.Sprintf("amqp091: prefetch %d, one ack per delivery", cfg.InFlight)
	}
	return finishNote(m, name, note)
}

// runRawPublish: one channel, window outstanding confirms, the adapter's
// envelope.
func runRawPublish(window int) func(context.Context, Env, Config) (Result, error) {
	return rawPublishContender("raw-publish-"+strconv.Itoa(window), window, enveloped, "")
}

// runRawPublishBare: runRawPublish with bare messages.
func runRawPublishBare(window int) func(context.Context, Env, Config) (Result, error) {
	return rawPublishContender("raw-publish-"+strconv.Itoa(window)+"-bare", window, persistent, ", bare messages")
}

func rawPublishContender(name string, window int, publishing func([]byte, int) amqp091.Publishing, note string) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		conn, err := amqp091.Dial(env["url"])
		if err != nil {
			return Result{}, err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return Result{}, err
		}
		defer ch.Close()
		exchange, queue, err := rawQueue(ch, amqpNamespace("rawpub"))
		if err != nil {
			return Result{}, err
		}
		defer func() {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}()
		tl := newTally(cfg.N)
		m := newMeter(tl)
		m.begin()
		if err := rawPublish(ctx, conn, exchange, "bench", cfg.N, window, cfg.Payload, publishing, tl.mark); err != nil {
			return Result{}, err
		}
		res, err := finishNote(m, name, fmt.Sprintf("amqp091: one channel, %d outstanding confirms, persistent", window)+note)
		if err != nil {
			return Result{}, err
		}
		return res, checkDepth(ch, queue, cfg.N)
	}
}

// checkDepth fails unless queue holds exactly n messages.
func checkDepth(ch *amqp091.Channel, queue string, n int) error {
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	if err != nil {
		return fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	if q.Messages != n {
		return fmt.Errorf("queue %s holds %d messages after %d confirmed publishes: the contender is broken, its figure is void", queue, q.Messages, n)
	}
	return nil
}

// runAdapterPublish: contender name, Adapter.Send from goroutines × chunk
// messages per Send (chunk 0: one Send of all N).
func runAdapterPublish(name string, goroutines, chunk int) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		ns := amqpNamespace("sluicepub")
		a, err := amqp.New(ctx, amqp.Options{URL: env["url"], Namespace: ns, Logger: quiet})
		if err != nil {
			return Result{}, err
		}
		defer a.Close(context.Background())
		spec := ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}
		sub, err := a.Subscribe(ctx, spec) // declares the queue the messages reach
		if err != nil {
			return Result{}, err
		}
		if err := sub.Stop(ctx); err != nil {
			return Result{}, err
		}
		if chunk == 0 {
			chunk = cfg.N
		}
		tl := newTally(cfg.N)
		m := newMeter(tl)
		m.begin()
		if err := produce(ctx, a, "bench", cfg.N, goroutines, chunk, cfg.Payload, 0, tl.mark); err != nil {
			return Result{}, fmt.Errorf("%s: %w", name, err)
		}
		res, err := finishNote(m, name, fmt.Sprintf("Adapter.Send: %d goroutine(s) × %d messages per Send", goroutines, chunk))
		if err != nil {
			return Result{}, err
		}
		conn, err := amqp091.Dial(env["url"])
		if err != nil {
			return Result{}, err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return Result{}, err
		}
		defer ch.Close()
		return res, checkDepth(ch, ns+"/bench/lb/bench", cfg.N)
	}
}
