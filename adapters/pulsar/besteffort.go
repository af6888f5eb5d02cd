package pulsar

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// Best effort (QoS BestEffort) on Pulsar is a non-persistent topic: the
// broker stores nothing, hands each message to the consumers that have
// permits at that moment and drops it for every subscription that has
// none. A logical topic's best-effort messages travel on its
// non-persistent twin ("non-persistent://" in place of "persistent://"),
// so best-effort and at-least-once messages of one topic are two streams:
// give a topic one class (TopicSpec.QoS).
//
// A consumer's permits reach the broker after Subscribe returned (the
// client sends its first FLOW from a goroutine of its own), so a message
// sent right after Subscribe would be dropped. Subscribe therefore
// publishes probe messages (ProbeProperty) to the twin until one comes
// back to the new consumer: then the broker has its permits. Every
// subscription of this adapter drops probes unseen; a consumer that is not
// sluice sees them as empty messages with that property.

// ProbeProperty marks the empty probe messages a best-effort Subscribe
// publishes to the non-persistent topic it joined.
const ProbeProperty = "sluice-probe"

// probeEvery paces the probes while a new consumer's permits are on their
// way.
const probeEvery = 20 * time.Millisecond

// twin is the non-persistent topic of persistent topic name.
func twin(name string) string {
	if rest, ok := strings.CutPrefix(name, "persistent://"); ok {
		return "non-persistent://" + rest
	}
	return name
}

// isProbe reports whether msg is a best-effort Subscribe's probe.
func isProbe(msg pulsarclient.Message) bool {
	_, ok := msg.Properties()[ProbeProperty]
	return ok
}

// awaitPermits publishes probes to s's non-persistent topic until one
// reaches s's consumer, or ctx ends. Messages that arrive meanwhile are
// kept for Receive. It runs before Subscribe returns (no Receive yet).
func (s *Subscription) awaitPermits(ctx context.Context, topic string) error {
	id := randomInstance()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		wm := message.NewMessage(id, nil)
		wm.Metadata = message.Metadata{ProbeProperty: id}
		wm.SetContext(ctx)
		if errs := s.a.pub.publish(topic, []*message.Message{wm}); len(errs) > 0 && errs[0] != nil {
			return fmt.Errorf("pulsar: best-effort subscribe to %s: probe: %w", topic, errs[0])
		}
		for waiting := true; waiting; {
			select {
			case cm, ok := <-s.consumer.Chan():
				if !ok {
					return fmt.Errorf("pulsar: consumer of %s closed: %w", s.name, ports.ErrClosed)
				}
				if isProbe(cm.Message) {
					mine := cm.Message.Properties()[ProbeProperty] == id
					s.consumer.Ack(cm.Message)
					if mine {
						return nil
					}
					continue
				}
				if d := s.accept(cm.Message, time.Now()); d != nil {
					s.held.push(time.Now(), d) // handed out by the first Receive
				}
			case <-tick.C:
				waiting = false
			case <-ctx.Done():
				return fmt.Errorf("pulsar: best-effort subscribe to %s: no probe came back (the consumer's permits did not reach the broker): %w", topic, ctx.Err())
			}
		}
	}
}
