// Package wmtest runs Watermill's universal pub/sub suite
// (github.com/ThreeDotsLabs/watermill/pubsub/tests) through the Watermill
// bridge over a sluice adapter: every adapter's tests call [Run], so the
// bridge is proven the same way on every broker.
package wmtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// Features is what the bridge gives a Watermill subscriber over any
// adapter: consumer groups, and persistence for the broker's life (a
// group's queue outlives its subscribers). Not exactly-once (sluice is
// at least once), not ordered (a nack requeues behind later messages), no
// old messages for a new subscriber (a group receives what is published
// after it exists), no context (only the envelope travels). An adapter
// that differs says so in its own copy.
var Features = tests.Features{ConsumerGroups: true, Persistent: true}

// Skip names a case of the suite an adapter cannot pass, and why (the
// reason is printed with the skip).
type Skip struct{ Case, Reason string }

// Run runs tests.TestPubSub with features. Each publisher/subscriber pair
// is made over the adapter open returns (return the same one every time
// to share it, see [Same]); cfg configures every subscriber, its Group
// naming the group of the suite's cases without one. The reconnect case
// needs features.RestartServiceCommand and otherwise does not run. The
// cases in skip are reported as skipped with their reason; every other
// case runs.
func Run(t *testing.T, features tests.Features, cfg wmbridge.SubscriberConfig, open func(t *testing.T) ports.Adapter, skip ...Skip) {
	t.Helper()
	pair := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		a := open(t)
		c := cfg
		c.Group = group
		return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, c)
	}
	single := func(t *testing.T) (message.Publisher, message.Subscriber) { return pair(t, cfg.Group) }
	if len(skip) == 0 {
		tests.TestPubSub(t, features, single, pair)
		return
	}
	// The cases of tests.TestPubSub, run the way it runs them, so that
	// some can be left out.
	cases := []suiteCase{
		{"TestPublishSubscribe", func(t *testing.T, c tests.TestContext) { tests.TestPublishSubscribe(t, c, single) }},
		{"TestConcurrentSubscribe", func(t *testing.T, c tests.TestContext) { tests.TestConcurrentSubscribe(t, c, single) }},
		{"TestConcurrentSubscribeMultipleTopics", func(t *testing.T, c tests.TestContext) { tests.TestConcurrentSubscribeMultipleTopics(t, c, single) }},
		{"TestResendOnError", func(t *testing.T, c tests.TestContext) { tests.TestResendOnError(t, c, single) }},
		{"TestNoAck", func(t *testing.T, c tests.TestContext) { tests.TestNoAck(t, c, single) }},
		{"TestContinueAfterSubscribeClose", func(t *testing.T, c tests.TestContext) { tests.TestContinueAfterSubscribeClose(t, c, single) }},
		{"TestConcurrentClose", func(t *testing.T, c tests.TestContext) { tests.TestConcurrentClose(t, c, single) }},
		{"TestContinueAfterErrors", func(t *testing.T, c tests.TestContext) { tests.TestContinueAfterErrors(t, c, single) }},
		{"TestPublishSubscribeInOrder", func(t *testing.T, c tests.TestContext) { tests.TestPublishSubscribeInOrder(t, c, single) }},
		{"TestPublisherClose", func(t *testing.T, c tests.TestContext) { tests.TestPublisherClose(t, c, single) }},
		{"TestTopic", func(t *testing.T, c tests.TestContext) { tests.TestTopic(t, c, single) }},
		{"TestMessageCtx", func(t *testing.T, c tests.TestContext) { tests.TestMessageCtx(t, c, single) }},
		{"TestSubscribeCtx", func(t *testing.T, c tests.TestContext) { tests.TestSubscribeCtx(t, c, single) }},
		{"TestNewSubscriberReceivesOldMessages", func(t *testing.T, c tests.TestContext) { tests.TestNewSubscriberReceivesOldMessages(t, c, single) }},
		{"TestReconnect", func(t *testing.T, c tests.TestContext) { tests.TestReconnect(t, c, single) }},
		{"TestConsumerGroups", func(t *testing.T, c tests.TestContext) { tests.TestConsumerGroups(t, c, pair) }},
	}
	for _, s := range skip {
		if !slices.ContainsFunc(cases, func(c suiteCase) bool { return c.name == s.Case }) {
			t.Fatalf("wmtest: no case %q in Watermill's suite to skip", s.Case)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range skip {
				if s.Case == c.name {
					t.Skip(s.Reason)
				}
			}
			if c.name != "TestReconnect" {
				t.Parallel()
			}
			c.run(t, tests.TestContext{TestID: tests.NewTestID(), Features: features})
		})
	}
}

type suiteCase struct {
	name string
	run  func(*testing.T, tests.TestContext)
}

// Same returns an open function for Run that shares a.
func Same(a ports.Adapter) func(*testing.T) ports.Adapter {
	return func(*testing.T) ports.Adapter { return a }
}

// StrandedByMultiplier reports whether a goroutine left after a test run
// is one Watermill's test multiplier strands, for faults.SplitLeaks: each
// subscriber's forwarder in internal/subscriber.(*multiplier).Subscribe
// sends into one unbuffered channel, so an at-least-once duplicate that
// arrives after the suite stopped reading blocks its forwarder forever,
// and the goroutine waiting for the forwarders with it. A forwarder
// blocked receiving is not claimed: it waits for the adapter to close its
// channel, which would be the adapter's leak.
func StrandedByMultiplier(stack string) bool {
	const pkg = "github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe."
	switch faults.TopFrame(stack) {
	case pkg + "func2":
		return strings.Contains(stack, " in state chan send,")
	case pkg + "func3":
		return strings.Contains(stack, "sync.(*WaitGroup).Wait")
	}
	return false
}

// Main is a TestMain for a package that runs Watermill's suite: it runs
// the tests and, when they passed, fails the run on any goroutine left
// behind but those the options ignore and those StrandedByMultiplier
// claims.
func Main(m *testing.M, ignore ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if _, others := faults.SplitLeaks(goleak.Find(ignore...), StrandedByMultiplier); len(others) > 0 {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run:\n%s\n", strings.Join(others, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}
