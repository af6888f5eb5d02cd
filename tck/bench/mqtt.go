package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("mqtt", mqttSuite) }

// mqttPublishers is how many goroutines publish concurrently in both
// contenders (each publish waits for its QoS 1 PUBACK).
const mqttPublishers = 4

// mqttSuite runs the same QoS 1 publish → consume (decode, map) → PUBACK
// work through the sluice MQTT adapter (flow pipeline) and through raw
// paho.golang clients, on one broker, at the same in-flight limit (the
// subscriber's Receive Maximum) and the same producer window. The broker is
// a mosquitto the bench starts itself, or the embedded broker when
// mosquitto is not installed (the note says which).
func mqttSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	url, note, stop, err := benchBroker(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	rawRun := func(ctx context.Context, cfg Config) (Result, error) { return runRawPaho(ctx, cfg, url, note) }
	adapterRun := func(ctx context.Context, cfg Config) (Result, error) { return runMQTT(ctx, cfg, url, note) }
	small := cfg
	small.N = min(cfg.N, 2000)
	if _, err := rawRun(ctx, small); err != nil {
		return nil, nil, err
	}
	if _, err := adapterRun(ctx, small); err != nil {
		return nil, nil, err
	}
	spiRun := func(ctx context.Context, cfg Config) (Result, error) { return runMQTTSPI(ctx, cfg, url, note) }
	results, err := rounds(ctx, cfg, rawRun, adapterRun, spiRun)
	return results, []Ratio{
		{Label: "mqtt/raw", Num: "mqtt", Den: "raw-paho"},
		{Label: "mqtt-spi/raw", Num: "mqtt-spi", Den: "raw-paho"},
	}, err
}

func benchBroker(ctx context.Context) (url, note string, stop func(), err error) {
	if _, berr := mqtttest.MosquittoBinary(); berr == nil {
		m, err := mqtttest.StartMosquitto(ctx, mqtttest.MosquittoOptions{})
		if err != nil {
			return "", "", nil, err
		}
		return m.URL(), "mosquitto", func() { _ = m.Close() }, nil
	}
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		return "", "", nil, err
	}
	return b.URL(), "embedded mochi", func() { _ = b.Close() }, nil
}

// publishPaced publishes cfg.N messages from mqttPublishers goroutines,
// each taking a slot of window before publishing.
func publishPaced(ctx context.Context, cfg Config, window chan struct{}, publish func(context.Context, benchMsg) error) error {
	padding := pad(cfg.Payload)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, mqttPublishers)
	for range mqttPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.N) {
					return
				}
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				if err := publish(ctx, benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()}); err != nil {
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

func runMQTT(ctx context.Context, cfg Config, url, note string) (Result, error) {
	a, err := mqtt.New(ctx, mqtt.Options{URL: url, Namespace: "bench" + fmt.Sprint(time.Now().UnixNano()%1e6), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
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
	var m Meter
	m.Start()
	if err := publishPaced(ctx, cfg, window, func(ctx context.Context, msg benchMsg) error {
		return flow.Send(ctx, a, "bench", msg)
	}); err != nil {
		return Result{}, err
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("mqtt: %d of %d settled: %w", done.Load(), cfg.N, ctx.Err())
	}
	for p.Stats().Acked < int64(cfg.N) { // the last PUBACKs trail the handler
		time.Sleep(50 * time.Microsecond)
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "mqtt", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: note + ": flow.Send QoS1 → $share → Decode → Map → Sink → PUBACK"}, nil
}

// runMQTTSPI drives the adapter's SPI directly, without flow: one
// goroutine receives up to the in-flight limit, decodes, maps and settles
// each delivery, as the raw callback does. The gap between mqtt-spi and
// mqtt is the pipeline's; the gap between raw-paho and mqtt-spi is the
// adapter's.
func runMQTTSPI(ctx context.Context, cfg Config, url, note string) (Result, error) {
	a, err := mqtt.New(ctx, mqtt.Options{URL: url, Namespace: "spibench" + fmt.Sprint(time.Now().UnixNano()%1e6), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight})
	if err != nil {
		return Result{}, err
	}
	var lat Latencies
	window := make(chan struct{}, maxOutstanding(cfg))
	consumed := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		n := 0
		for n < cfg.N {
			ds, err := sub.Receive(cctx, cfg.InFlight)
			if err != nil {
				consumed <- err
				return
			}
			for _, d := range ds {
				var msg benchMsg
				if err := json.Unmarshal(d.Payload, &msg); err != nil {
					consumed <- err
					return
				}
				o := scale(msg)
				lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
				<-window
				if err := sub.Settle(cctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
					consumed <- err
					return
				}
				n++
			}
		}
		consumed <- nil
	}()
	var m Meter
	m.Start()
	if err := publishPaced(ctx, cfg, window, func(ctx context.Context, msg benchMsg) error {
		return flow.Send(ctx, a, "bench", msg)
	}); err != nil {
		return Result{}, err
	}
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "mqtt-spi", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: note + ": flow.Send QoS1 → $share → Receive → Unmarshal → map → Settle(Ack) → PUBACK"}, nil
}

// runRawPaho is the baseline: one paho client publishing at QoS 1 (waiting
// for each PUBACK, from the same publisher goroutines, with the same
// envelope as user properties) and one paho client
// on the same shared subscription with Receive Maximum = in-flight limit,
// decoding and mapping in its receive callback, PUBACK sent by paho after
// the callback returns.
func runRawPaho(ctx context.Context, cfg Config, rawURL, note string) (Result, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Result{}, err
	}
	topic := fmt.Sprintf("rawbench%d/bench", time.Now().UnixNano()%1e6)
	var lat Latencies
	var done atomic.Int64
	finished := make(chan struct{})
	window := make(chan struct{}, maxOutstanding(cfg))
	handle := func(pr paho.PublishReceived) (bool, error) {
		var msg benchMsg
		if err := json.Unmarshal(pr.Packet.Payload, &msg); err != nil {
			return true, err
		}
		o := scale(msg)
		lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
		<-window
		if done.Add(1) == int64(cfg.N) {
			close(finished)
		}
		return true, nil
	}
	rm := uint16(min(cfg.InFlight, 65535))
	sub, err := rawClient(ctx, u.Host, "rawsub", &rm, handle)
	if err != nil {
		return Result{}, err
	}
	defer sub.Disconnect(&paho.Disconnect{})
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/bench/" + topic, QoS: 1}}}); err != nil {
		return Result{}, err
	}
	pub, err := rawClient(ctx, u.Host, "rawpub", nil, nil)
	if err != nil {
		return Result{}, err
	}
	defer pub.Disconnect(&paho.Disconnect{})
	var m Meter
	m.Start()
	if err := publishPaced(ctx, cfg, window, func(ctx context.Context, msg benchMsg) error {
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		// The same envelope the adapter puts on the wire (flow.NewMessage
		// and Send's stamp), as MQTT 5 user properties.
		_, err = pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: b,
			Properties: &paho.PublishProperties{ContentType: "application/json", User: []paho.UserProperty{
				{Key: ports.HeaderType, Value: "main.benchMsg"},
				{Key: ports.HeaderContentType, Value: "application/json"},
				{Key: ports.HeaderID, Value: ports.NewID()},
				{Key: ports.HeaderSpecVersion, Value: "1.0"},
				{Key: ports.HeaderTime, Value: time.Now().UTC().Format(time.RFC3339Nano)},
			}}})
		return err
	}); err != nil {
		return Result{}, err
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("raw-paho: %d of %d consumed: %w", done.Load(), cfg.N, ctx.Err())
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "raw-paho", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: note + ": paho Publish QoS1 → $share → callback Unmarshal → map → PUBACK"}, nil
}

func rawClient(ctx context.Context, addr, id string, receiveMax *uint16, handle func(paho.PublishReceived) (bool, error)) (*paho.Client, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cc := paho.ClientConfig{Conn: conn}
	if handle != nil {
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){handle}
	}
	c := paho.NewClient(cc)
	cp := &paho.Connect{ClientID: fmt.Sprintf("%s-%d", id, time.Now().UnixNano()), CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{ReceiveMaximum: receiveMax, RequestProblemInfo: true}}
	if _, err := c.Connect(ctx, cp); err != nil {
		return nil, err
	}
	return c, nil
}
