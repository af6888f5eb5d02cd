package tck

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// Harness connects the kit to one adapter and its broker. The kit makes a
// fresh Harness for every subtest and closes it at the end of that subtest.
type Harness interface {
	// MakeAdapter returns a new adapter instance — a new "process" — that
	// talks to the harness's broker under the harness's namespace. The kit
	// calls it several times per subtest: two at once for competing or
	// broadcast instances, and again to restart an instance in the same
	// group. The kit closes every adapter it makes.
	MakeAdapter(ctx context.Context) (ports.Adapter, error)
	// Close releases what the harness holds (not the broker, which may be
	// shared by every subtest).
	Close()
}

// NewHarness makes a Harness for one subtest. Skipping or failing t is
// allowed (for example when no broker is reachable and CI is not set).
type NewHarness func(ctx context.Context, t *testing.T) (Harness, error)

// DeadLetterFaults is implemented by harnesses that can make the adapter's
// dead-letter publishes fail, so the kit can prove that a failed
// dead-letter publish never settles the original.
type DeadLetterFaults interface {
	// FailDeadLetters makes every dead-letter publish of adapters made by
	// this harness fail (true) or succeed again (false).
	FailDeadLetters(fail bool)
}

// SendFaults is implemented by harnesses that can make the broker refuse
// or fail to confirm a publish, so the kit can check that Send reports it.
type SendFaults interface {
	// FailSends makes the next publishes of adapters made by this harness
	// go unconfirmed (true) or confirmed again (false).
	FailSends(fail bool)
}

// Topology is implemented by harnesses that can create a physical topology
// natively, as a program written without sluice made it (names of its own,
// not the ones the adapter derives), and configure an adapter to adopt it.
// AdoptExistingTopology needs it; without it that case is skipped and
// reported as a gap.
type Topology interface {
	// CreateExisting creates, with the broker's own client or API, what
	// an existing program would have for one logical topic and LoadBalance
	// group (an exchange, a routing key and a queue; a topic and a
	// subscription), and returns an adapter made by this harness whose
	// configuration maps topic and group to those names.
	CreateExisting(ctx context.Context, topic ports.Topic, group string) (Existing, error)
}

// Existing is a topology made by Topology.CreateExisting.
type Existing struct {
	// Adapter maps the logical topic and group to the existing names. The
	// kit closes it.
	Adapter ports.Adapter
	// Names lists the physical names, for the test log.
	Names string
	// Publish, when set, publishes payload natively to the existing names,
	// as the program being migrated does; the kit expects the adopting
	// consumer to receive it.
	Publish func(ctx context.Context, payload []byte) error
	// Unchanged reports an error naming each difference when the broker's
	// topology is no longer exactly as CreateExisting made it (a
	// redeclared or re-argued queue, an added queue or binding). Leave it
	// nil only when the harness cannot observe the broker's topology, and
	// say why in Unobservable.
	Unchanged func(ctx context.Context) error
	// Unobservable, with a nil Unchanged, says why the harness cannot
	// tell whether the topology was left unchanged; the case then skips
	// that check and prints the reason. A no-op Unchanged would pass
	// without checking anything.
	Unobservable string
}

// ForeignProducer is implemented by harnesses that can publish a message
// the way a program without sluice does: with the broker's own client or
// command-line tool, the body only, no sluice header or property. The
// ForeignProducer case needs it; without it that case is skipped and
// reported as a gap.
type ForeignProducer interface {
	// PublishForeign publishes m to the destination that subscriptions of
	// topic on this harness's adapters read (a LoadBalance group that is
	// already subscribed must receive it). It returns the identity the
	// adapter must give the message under the rule of ports.IDSource:
	// IDProducer when m.ID was set in a message-id field of the broker's
	// own, IDBroker when the broker assigns a stable identity, IDNone when
	// the message has none.
	PublishForeign(ctx context.Context, topic ports.Topic, m ForeignMessage) (ports.IDSource, error)
}

// ForeignMessage is a message as a producer without sluice writes it.
type ForeignMessage struct {
	// Body is the message body: a JSON object whose values are strings,
	// with its keys in byte order and no spaces. A harness for a broker
	// whose plain producers write fields rather than a body (Redis
	// Streams) writes one field per key, in that order.
	Body []byte
	// ID, when not empty, goes into the broker's own message-id field
	// where a plain producer can set one (the AMQP message-id property);
	// it is ignored elsewhere.
	ID string
}
