package adapters_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

func ExampleOpen() {
	ctx := context.Background()
	a, err := adapters.Open(ctx, "mem://?namespace=billing&inflight=32")
	if err != nil {
		panic(err)
	}
	defer a.Close(ctx)
	fmt.Println(a.Name(), a.Capabilities())
	spec := adapters.Spec(a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	fmt.Println("in flight:", spec.InFlight)
	// Output:
	// mem delay delayed-requeue native-dlq broadcast per-message-ack competing-consumers confirm native-batch expiry durable-groups exact-redelivery-count start-earliest single-active best-effort retention max-length ordering=none instance-guard=refused max-message-bytes=67108864
	// in flight: 32
}

// Bad URLs and options are refused with the parameter named; credentials
// never appear.
func ExampleOpen_errors() {
	ctx := context.Background()
	for _, raw := range []string{"mem://?prefetch=10", "mem://guest:s3cret@/", "rabbit://localhost/"} {
		_, err := adapters.Open(ctx, raw)
		fmt.Println(strings.SplitN(err.Error(), " (registered", 2)[0])
	}
	// Output:
	// adapters: open mem://?prefetch=10: parameter prefetch: unknown for mem:// (accepted: namespace, inflight, max_attempts, backoff, max_backoff, max_queue; and where they apply password_file, password_env, ca_file, cert_file, key_file, server_name, insecure)
	// adapters: open mem://guest:xxxxx@/: parameter credentials: mem:// takes no user name or password
	// adapters: open rabbit://localhost/: invalid argument: unknown scheme "rabbit"
}

func ExampleFallbacks() {
	for _, f := range adapters.Fallbacks(ports.Capabilities{PublisherConfirm: true, Broadcast: true, DurableGroups: true,
		PerMessageAck: true, NativeBatch: true, SubscriptionExpiry: true, ExactRedeliveryCount: true, DelayedRequeue: true, Ordering: ports.OrderPerKey,
		StartEarliest: true, SingleActive: true, Retention: true, MaxLength: true, MaxMessageBytes: 1 << 20,
		InstanceGuard: ports.InstanceRefused}) {
		fmt.Printf("%s: %s\n", f.Capability, f.Effect)
	}
	// Output:
	// delay: delayed messages are stored at once and held by the consuming adapter's local scheduler until due, unacknowledged (taking a prefetch or receive-maximum slot where the broker has one)
	// native-dlq: dead letters are published with confirms to the explicit "<topic>.dlq" topic
	// best-effort: QoS BestEffort travels at-least-once (stronger, not cheaper): best-effort messages are confirmed, requeued and dead-lettered like any other, and Subscribe says so
}
