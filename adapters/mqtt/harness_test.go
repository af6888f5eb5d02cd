package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness makes adapters on one broker under a namespace of its own.
//
// MQTT sessions are named by client id, so a LoadBalance member resumes
// its unacknowledged messages only when it comes back under the same
// instance identity. The harness models an orchestrator that gives a
// restarted replica the identity of the one that stopped (a StatefulSet
// ordinal): each LoadBalance subscription without an Instance gets the
// lowest slot ("r0", "r1", ...) not held by a live subscription of the same
// topic and group in this harness.
type harness struct {
	url string
	ns  string
	rm  int // mqtt.Options.ReceiveMaximum

	failSends, failDLQ atomic.Bool

	mu    sync.Mutex
	slots map[string]map[int]bool // topic/group -> slots held
}

func newHarness(url string, receiveMaximum int) tck.NewHarness {
	return func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		return &harness{url: url, rm: receiveMaximum, ns: "tck" + randHex(), slots: map[string]map[int]bool{}}, nil
	}
}

var errRefused = errors.New("refused by the test harness")

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	// Instance r0 is the first slot's (below): a group declared ahead
	// keeps its messages in the session of the member with the declaring
	// adapter's Instance, which the first LoadBalance subscription resumes.
	a, err := mqtt.New(ctx, mqtt.Options{URL: h.url, Namespace: h.ns, ReceiveMaximum: h.rm, Logger: quietLog, Instance: "r0"})
	if err != nil {
		return nil, err
	}
	mqtt.SetPublishFault(a, func(topic string) error {
		dlq := strings.HasSuffix(topic, "/dlq")
		if (dlq && h.failDLQ.Load()) || (!dlq && h.failSends.Load()) {
			return errRefused
		}
		return nil
	})
	return &slotAdapter{Adapter: a, h: h}, nil
}

func (h *harness) Close() {}

// CreateExisting implements tck.Topology. An MQTT program's topology is
// only names — a topic and the share name of its shared subscription,
// nothing a broker stores ahead — so nothing is created: the adapter is
// configured to use a legacy topic outside the namespace and a share name
// of the legacy program's, and Publish publishes to that topic with a raw
// MQTT client. There is no Unchanged check (no MQTT broker lists or
// stores topics): Unobservable says so, and the case prints it as a
// skipped check.
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	legacy := "legacy" + randHex() + "/plant1/" + strings.ReplaceAll(string(topic), "/", "-")
	share := "legacy-" + group
	a, err := mqtt.New(ctx, mqtt.Options{URL: h.url, Namespace: h.ns, ReceiveMaximum: h.rm, Logger: quietLog, Instance: "r0",
		Existing: []mqtt.Existing{{Topic: topic, PhysicalTopic: legacy, Shares: map[string]string{group: share}}}})
	if err != nil {
		return tck.Existing{}, err
	}
	publish := func(ctx context.Context, payload []byte) error {
		u, err := url.Parse(h.url)
		if err != nil {
			return err
		}
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			return err
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn})
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: "legacy" + randHex(), CleanStart: true, KeepAlive: 30}); err != nil {
			return err
		}
		defer c.Disconnect(&paho.Disconnect{})
		_, err = c.Publish(ctx, &paho.Publish{Topic: legacy, QoS: 1, Payload: payload})
		return err
	}
	return tck.Existing{Adapter: &slotAdapter{Adapter: a, h: h}, Names: "topic " + legacy + ", shared subscription $share/" + share + "/" + legacy,
		Publish: publish, Unobservable: "an MQTT broker keeps no declared topology to compare: a topic exists by being " +
			"published to and a shared subscription by its members' SUBSCRIBE, and neither mosquitto nor the embedded broker lists " +
			"subscriptions to a client ($SYS gives counts only, shared by every test of the broker)"}, nil
}

// FailSends implements tck.SendFaults.
func (h *harness) FailSends(fail bool) { h.failSends.Store(fail) }

// FailDeadLetters implements tck.DeadLetterFaults.
func (h *harness) FailDeadLetters(fail bool) { h.failDLQ.Store(fail) }

func (h *harness) take(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.slots[key]
	if held == nil {
		held = map[int]bool{}
		h.slots[key] = held
	}
	for k := 0; ; k++ {
		if !held[k] {
			held[k] = true
			return k
		}
	}
}

func (h *harness) give(key string, k int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.slots[key], k)
}

// slotAdapter assigns slot instances to LoadBalance subscriptions.
type slotAdapter struct {
	*mqtt.Adapter
	h *harness
}

func (a *slotAdapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if spec.Mode != ports.LoadBalance || spec.Instance != "" {
		return a.Adapter.Subscribe(ctx, spec)
	}
	key := string(spec.Topic) + "/" + spec.Group
	k := a.h.take(key)
	spec.Instance = fmt.Sprintf("r%d", k)
	s, err := a.Adapter.Subscribe(ctx, spec)
	if err != nil {
		a.h.give(key, k)
		return nil, err
	}
	return &slotSubscription{Subscription: s, release: sync.OnceFunc(func() { a.h.give(key, k) })}, nil
}

type slotSubscription struct {
	ports.Subscription
	release func()
}

func (s *slotSubscription) Stop(ctx context.Context) error {
	err := s.Subscription.Stop(ctx)
	s.release()
	return err
}

func randHex() string {
	var b [4]byte
	for i := range b {
		b[i] = "0123456789abcdef"[cryptoRandIntn(16)]
	}
	return string(b[:])
}
