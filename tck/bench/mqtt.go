package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
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

// mqttPublishers is how many goroutines publish concurrently in every
// contender (each publish waits for its QoS 1 PUBACK).
const mqttPublishers = 4

// The mqtt suite publishes and consumes concurrently (QoS 1, MQTT 5, a
// shared subscription with Receive Maximum = in-flight), on a mosquitto the
// bench starts (or the embedded broker when mosquitto is not installed):
//
//	paho-manual     best raw: paho.golang with manual acks, PUBACKs sent
//	                every -ackinterval (the denominator), every message
//	                carrying the envelope the adapter writes (user
//	                properties)
//	paho-auto       weaker: paho's automatic PUBACK after each callback
//	paho-manual-bare  paho-manual over bare messages: the payload and the
//	                Content Type property only (RATIO mqtt/bare-raw)
//	mqtt, mqtt-batch  sluice default and batch pipelines
//	mqtt-latency    default pipeline, paced producer
//
// Every contender publishes from mqttPublishers goroutines.
func init() {
	t := target{open: openMQTT, publishers: mqttPublishers, chunk: 1}
	register(Suite{
		Name:     "mqtt",
		About:    fmt.Sprintf("QoS 1 publish (%d goroutines) and consume concurrently; timed from the first delivery", mqttPublishers),
		DefaultN: 20000,
		Setup:    setupMQTT,
		Contenders: []Contender{
			{Name: "paho-manual", Run: runPaho(true, true)},
			{Name: "paho-auto", Run: runPaho(false, true)},
			{Name: "paho-manual-bare", Run: runPaho(true, false)},
			{Name: "mqtt", Run: t.runPipeline(false)},
			{Name: "mqtt-batch", Run: t.runPipeline(true)},
			// Diagnostic: the default pipeline with rounds settled at once.
			{Name: "mqtt-linger0", Run: t.runPipeline(false, flow.WithSettleLinger(0))},
			{Name: "mqtt-latency", Latency: true, Run: t.runLatency()},
		},
		Ratios: []Ratio{
			{Label: "mqtt-linger0/best-raw", Num: "mqtt-linger0", Den: []string{"paho-manual"}},
			{Label: "mqtt/best-raw", Num: "mqtt", Den: []string{"paho-manual"}},
			{Label: "mqtt-batch/best-raw", Num: "mqtt-batch", Den: []string{"paho-manual"}},
			{Label: "paho-auto/best-raw", Num: "paho-auto", Den: []string{"paho-manual"}},
			{Label: "paho-manual-bare/best-raw", Num: "paho-manual-bare", Den: []string{"paho-manual"}},
			{Label: "mqtt/bare-raw", Num: "mqtt", Den: []string{"paho-manual-bare"}},
		},
	})
}

func setupMQTT(ctx context.Context, _ Config) (Env, func(), error) {
	if _, err := mqtttest.MosquittoBinary(); err == nil {
		m, err := mqtttest.StartMosquitto(ctx, mqtttest.MosquittoOptions{})
		if err != nil {
			return nil, nil, err
		}
		fmt.Println("broker: private mosquitto on 127.0.0.1")
		return Env{"url": m.URL(), brokerPIDEnv: strconv.Itoa(m.PID())}, func() { _ = m.Close() }, nil
	}
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		return nil, nil, err
	}
	fmt.Println("broker: embedded (mosquitto not installed)")
	return Env{"url": b.URL(), brokerPIDEnv: strconv.Itoa(os.Getpid())}, func() { _ = b.Close() }, nil
}

func openMQTT(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := mqtt.New(ctx, mqtt.Options{URL: env["url"], Namespace: fmt.Sprintf("bench%d", os.Getpid()), Logger: quiet})
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	return a, ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}, func() { _ = a.Close(context.Background()) }, nil
}

// runPaho is one paho client publishing at QoS 1 (with envelope, the
// envelope the adapter writes, as user properties; without, the payload
// and the Content Type property only) and one consuming on a shared
// subscription, decoding and mapping in its callback. manual: the
// callback calls Ack and paho sends the PUBACKs every -ackinterval;
// otherwise paho acks after the callback returns.
func runPaho(manual, envelope bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		name := "paho-auto"
		if manual {
			name = "paho-manual"
		}
		if !envelope {
			name += "-bare"
		}
		u, err := url.Parse(env["url"])
		if err != nil {
			return Result{}, err
		}
		topic := fmt.Sprintf("raw%d/bench", os.Getpid())
		tl := newTally(cfg.N)
		m := newMeter(tl)
		var sub *paho.Client
		var herr atomic.Value
		handle := func(pr paho.PublishReceived) (bool, error) {
			m.begin()
			i, err := handleJSON(pr.Packet.Payload)
			if err != nil {
				herr.Store(err)
				return true, err
			}
			if manual {
				if err := sub.Ack(pr.Packet); err != nil {
					herr.Store(err)
					return true, err
				}
			}
			tl.mark(i) // auto: paho writes the PUBACK when this returns
			return true, nil
		}
		rm := uint16(min(cfg.InFlight, 65535))
		sub, err = pahoClient(ctx, u.Host, "rawsub", &rm, handle, manual, cfg.AckInterval)
		if err != nil {
			return Result{}, err
		}
		defer sub.Disconnect(&paho.Disconnect{})
		if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/bench/" + topic, QoS: 1}}}); err != nil {
			return Result{}, err
		}
		pub, err := pahoClient(ctx, u.Host, "rawpub", nil, nil, false, 0)
		if err != nil {
			return Result{}, err
		}
		defer pub.Disconnect(&paho.Disconnect{})
		produced := make(chan error, 1)
		go func() { produced <- pahoPublish(ctx, pub, topic, cfg, envelope) }()
		if err := waitAll(ctx, name, tl, produced); err != nil {
			return Result{}, err
		}
		if err, ok := herr.Load().(error); ok {
			return Result{}, err
		}
		note := "paho: callback decode+map, automatic PUBACK"
		if manual {
			note = fmt.Sprintf("paho: callback decode+map, manual Ack, PUBACKs every %v", cfg.AckInterval)
		}
		if !envelope {
			note += ", bare messages"
		}
		return finishNote(m, name, note)
	}
}

// pahoPublish publishes messages 0..N-1 from mqttPublishers goroutines,
// with the adapter's envelope as user properties when envelope, else
// with the Content Type property alone.
func pahoPublish(ctx context.Context, pub *paho.Client, topic string, cfg Config, envelope bool) error {
	padding := pad(cfg.Payload)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, mqttPublishers)
	for range mqttPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.N {
					return
				}
				b, err := json.Marshal(benchMsg{Device: "dev-" + strconv.Itoa(i%64), Value: float64(i), Pad: padding})
				if err != nil {
					errs <- err
					return
				}
				props := &paho.PublishProperties{ContentType: "application/json"}
				if envelope {
					// The envelope the adapter puts on the wire: the content
					// type as the property, the rest as user properties.
					props.User = []paho.UserProperty{
						{Key: ports.HeaderID, Value: ports.NewID()},
					}
				}
				_, err = pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: b, Properties: props})
				if err != nil {
					errs <- fmt.Errorf("publish: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func pahoClient(ctx context.Context, addr, id string, receiveMax *uint16, handle func(paho.PublishReceived) (bool, error), manual bool, ackEvery time.Duration) (*paho.Client, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cc := paho.ClientConfig{Conn: conn, EnableManualAcknowledgment: manual, SendAcksInterval: ackEvery}
	if handle != nil {
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){handle}
	}
	c := paho.NewClient(cc)
	cp := &paho.Connect{ClientID: fmt.Sprintf("%s-%d-%d", id, os.Getpid(), time.Now().UnixNano()%1e9), CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{ReceiveMaximum: receiveMax, RequestProblemInfo: true}}
	if _, err := c.Connect(ctx, cp); err != nil {
		return nil, err
	}
	return c, nil
}
