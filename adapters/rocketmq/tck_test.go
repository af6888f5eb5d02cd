package rocketmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// peerInvisible is the invisible duration the TCK uses against the peer:
// short, so that the cases about unsettled messages (redelivered after the
// invisible duration) run quickly.
const peerInvisible = 2 * time.Second

// TestTCK runs the contract kit:
//
//   - "rocketmq": against a real RocketMQ 5 proxy at ROCKETMQ_ENDPOINT
//     (host:8081). Only this run can certify the adapter against Apache
//     RocketMQ; without ROCKETMQ_ENDPOINT it is skipped, saying so.
//   - "rocketmqtest": the official v5 client over loopback gRPC against
//     rocketmqtest, the project's RocketMQ 5 protocol peer. It proves the
//     adapter speaks the protocol the client expects and honours the
//     semantics the peer implements; it is NOT Apache RocketMQ.
func TestTCK(t *testing.T) {
	t.Run("rocketmq", func(t *testing.T) {
		ep := os.Getenv("ROCKETMQ_ENDPOINT")
		if ep == "" {
			t.Skip("ROCKETMQ_ENDPOINT not set: the RocketMQ adapter is NOT certified against Apache RocketMQ by this run " +
				"(start a RocketMQ 5 namesrv, broker and proxy, e.g. with the apache/rocketmq:5.3.1 image and " +
				"autoCreateTopicEnable=true, then ROCKETMQ_ENDPOINT=127.0.0.1:8081 go test -run TestTCK/rocketmq$ ./adapters/rocketmq/)")
		}
		t.Logf("running the TCK against the RocketMQ proxy at %s", ep)
		tck.RunWith(t, endpointHarness(ep, nil, 10*time.Second), tck.Options{Timeout: 60 * time.Second, InstanceTTL: 2 * time.Second, Delay: 2 * time.Second})
	})
	t.Run("rocketmqtest", func(t *testing.T) {
		t.Logf("running the TCK with the official v5 client against rocketmqtest — a RocketMQ 5 gRPC " +
			"protocol peer written for these tests, NOT Apache RocketMQ")
		tck.RunWith(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
			b, err := rocketmqtest.Start()
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { b.Close() })
			t.Cleanup(func() {
				if !t.Skipped() {
					return
				}
				for _, c := range []string{"InstanceTTL", "TopicRetention", "NewGroupStartsAtEarliest", "SingleActiveConsumerFailover", "ExactlyOnceTransform"} {
					if strings.Contains(t.Name(), c) {
						return // the adapter declares the capability false
					}
				}
				t.Errorf("TCK case %s skipped against the peer: only capability skips are expected", t.Name())
			})
			return endpointHarness(b.Endpoint(), b, peerInvisible)(ctx, t)
		}, tck.Options{})
	})
}

// endpointHarness makes adapters on one endpoint; with a peer it also
// offers the send and dead-letter fault hooks.
func endpointHarness(ep string, b *rocketmqtest.Broker, invisible time.Duration) tck.NewHarness {
	return func(context.Context, *testing.T) (tck.Harness, error) {
		h := &harness{ep: ep, invisible: invisible}
		if b != nil {
			return &peerHarness{harness: h, b: b}, nil
		}
		return h, nil
	}
}

type harness struct {
	ep        string
	invisible time.Duration
}

func (h *harness) options() rocketmq.Options {
	return rocketmq.Options{Endpoint: h.ep, InvisibleDuration: h.invisible, AwaitDuration: time.Second}
}

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return rocketmq.New(ctx, h.options())
}
func (h *harness) Close() {}

type peerHarness struct {
	*harness
	b *rocketmqtest.Broker
}

func (h *peerHarness) FailSends(fail bool) { h.b.RefuseSends(fail) }
func (h *peerHarness) FailDeadLetters(fail bool) {
	if !fail {
		h.b.ControlSend(nil)
		return
	}
	h.b.ControlSend(func(topic string) error {
		if strings.HasSuffix(topic, "|dlq") { // ports.DeadLetterSuffix, '.' mapped to '|'
			return errRefusedDLQ
		}
		return nil
	})
}

var errRefusedDLQ = &refused{"dead-letter publish refused by the test harness"}

type refused struct{ s string }

func (r *refused) Error() string { return r.s }

// CreateExisting implements tck.Topology on the peer: a topic and a
// consumer group an administrator made (names of their own, not derived),
// and an adapter adopting them with WithExisting. Publish sends with the
// official v5 producer, as the program being migrated does. Unchanged
// checks that the adopted topic still has exactly that one group: the
// adapter created no group of its own there.
func (h *peerHarness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	legacy, gid := "LEGACY_"+randName(), "GID_"+randName()
	h.b.CreateTopic(legacy)
	h.b.CreateGroup(legacy, gid)
	o := h.options()
	o.Existing = []rocketmq.Existing{{Topic: topic, As: legacy, Groups: map[string]string{group: gid}}}
	a, err := rocketmq.New(ctx, o)
	if err != nil {
		return tck.Existing{}, err
	}
	publish := func(ctx context.Context, payload []byte) error {
		p, err := rmq.NewProducer(&rmq.Config{Endpoint: h.ep, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(legacy))
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		defer p.GracefulStop()
		_, err = p.Send(ctx, &rmq.Message{Topic: legacy, Body: payload})
		return err
	}
	unchanged := func(context.Context) error {
		if g := h.b.Groups(legacy); len(g) != 1 || g[0] != gid {
			return fmt.Errorf("topic %s has groups %v, want only %s", legacy, g, gid)
		}
		return nil
	}
	return tck.Existing{Adapter: a, Names: "topic " + legacy + ", consumer group " + gid, Publish: publish, Unchanged: unchanged}, nil
}

func randName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	_ tck.Topology         = (*peerHarness)(nil)
	_ tck.SendFaults       = (*peerHarness)(nil)
	_ tck.DeadLetterFaults = (*peerHarness)(nil)
)
