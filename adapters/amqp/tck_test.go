package amqp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// harness makes adapters on the package's RabbitMQ node under a namespace
// of its own, with shared fault switches.
type harness struct {
	url    string
	ns     string
	qt     amqp.QueueType
	faults *amqp.Faults
	node   *rabbittest.Node
}

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	o := amqp.WithFaults(amqp.Options{URL: h.url, Namespace: h.ns, QueueType: h.qt}, h.faults)
	return amqp.New(ctx, o)
}
func (h *harness) Close()                    {}
func (h *harness) FailDeadLetters(fail bool) { h.faults.FailDeadLetters(fail) }
func (h *harness) FailSends(fail bool)       { h.faults.FailSends(fail) }

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
	_ tck.Topology         = (*harness)(nil)
)

// CreateExisting declares, with amqp091-go as a hand-written program
// would, a topic exchange, a queue of the harness's queue type with a TTL,
// and a binding under a routing key of its own, and returns an adapter
// that adopts them (Options.Existing). Unchanged compares rabbitmqctl's
// listing of the queue (durability, arguments) and of every binding of the
// exchange or the queue with the listing taken right after creation.
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	node := h.node
	exch, key, queue := "legacy."+h.ns+".e", "legacy.r."+h.ns+"."+group, "legacy."+h.ns+".q."+group
	conn, err := amqp091.Dial(h.url)
	if err != nil {
		return tck.Existing{}, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return tck.Existing{}, err
	}
	if err := ch.ExchangeDeclare(exch, "topic", true, false, false, false, nil); err != nil {
		return tck.Existing{}, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": string(h.qt), "x-message-ttl": int64(3_600_000)}); err != nil {
		return tck.Existing{}, err
	}
	if err := ch.QueueBind(queue, key, exch, false, nil); err != nil {
		return tck.Existing{}, err
	}
	snapshot := func(ctx context.Context) (string, error) {
		qs, err := node.Ctl(ctx, "list_queues", "-q", "--no-table-headers", "name", "durable", "auto_delete", "arguments")
		if err != nil {
			return "", err
		}
		bs, err := node.Ctl(ctx, "list_bindings", "-q", "--no-table-headers", "source_name", "destination_name", "routing_key", "arguments")
		if err != nil {
			return "", err
		}
		var lines []string
		for _, l := range strings.Split(qs+bs, "\n") {
			if strings.Contains(l, exch) || strings.Contains(l, queue) {
				lines = append(lines, l)
			}
		}
		slices.Sort(lines)
		return strings.Join(lines, "\n"), nil
	}
	before, err := snapshot(ctx)
	if err != nil {
		return tck.Existing{}, err
	}
	o := amqp.WithFaults(amqp.Options{URL: h.url, Namespace: h.ns, QueueType: h.qt, Existing: &amqp.Existing{
		Topics: map[ports.Topic]amqp.ExistingTopic{topic: {Exchange: exch, RoutingKey: key}},
		Groups: map[amqp.ExistingGroup]string{{Topic: topic, Group: group}: queue},
	}}, h.faults)
	a, err := amqp.New(ctx, o)
	if err != nil {
		return tck.Existing{}, err
	}
	return tck.Existing{
		Adapter: a,
		Names:   fmt.Sprintf("exchange %s, routing key %s, queue %s: %s", exch, key, queue, before),
		Publish: func(ctx context.Context, payload []byte) error {
			c, err := amqp091.Dial(h.url)
			if err != nil {
				return err
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			if err := ch.Confirm(false); err != nil {
				return err
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exch, key, true, false, amqp091.Publishing{Body: payload, DeliveryMode: amqp091.Persistent})
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				return fmt.Errorf("native publish not confirmed: %v", err)
			}
			return nil
		},
		Unchanged: func(ctx context.Context) error {
			after, err := snapshot(ctx)
			if err != nil {
				return err
			}
			if after != before {
				return fmt.Errorf("before:\n%s\nafter:\n%s", before, after)
			}
			return nil
		},
	}, nil
}

func runTCK(t *testing.T, qt amqp.QueueType, opts tck.Options) {
	node := rabbittest.Shared(t)
	tck.RunWith(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		t.Cleanup(func() {
			// RabbitMQ cannot start a new queue at older messages
			// (Capabilities.StartEarliest false) nor commit a consumed
			// position with published messages (TransactionalSend false);
			// no other case may skip.
			if t.Skipped() && !strings.HasSuffix(t.Name(), "/NewGroupStartsAtEarliest") && !strings.HasSuffix(t.Name(), "/ExactlyOnceTransform") {
				t.Errorf("TCK case %s skipped: the amqp adapter declares every other capability the kit asks for", t.Name())
			}
		})
		return &harness{url: node.URL, ns: namespace("tck"), qt: qt, faults: &amqp.Faults{}, node: node}, nil
	}, opts)
}

// TestTCK runs the whole contract kit against a real RabbitMQ with quorum
// queues (the default). No case may skip. RabbitMQ checks x-expires of a
// quorum queue at its quorum tick (quorum_tick_interval, 5s by default),
// so an idle instance queue goes between TTL and TTL+5s after its last
// consumer left: the instance-expiry case uses a 4s TTL and waits 12s.
func TestTCK(t *testing.T) { runTCK(t, amqp.Quorum, tck.Options{InstanceTTL: 4 * time.Second}) }

// TestTCKClassic runs the kit with classic queues, whose expiry timers are
// exact and whose redelivery count is a lower bound (the kit then checks
// that it increases).
func TestTCKClassic(t *testing.T) { runTCK(t, amqp.Classic, tck.Options{}) }
