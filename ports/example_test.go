package ports_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/ports"
)

func ExamplePoison() {
	err := ports.Poison(errors.New("unknown schema version 7"))
	fmt.Println(ports.IsPoison(err), err)
	fmt.Println(ports.IsPoison(errors.New("connection reset")))
	// Output:
	// true poison: unknown schema version 7
	// false
}

func ExampleDeadLetterTopic() {
	fmt.Println(ports.DeadLetterTopic("orders"))
	// Output: orders.dlq
}

func ExampleTopic_DeadLetterOf() {
	base, ok := ports.Topic("orders.dlq").DeadLetterOf()
	fmt.Printf("%q %v\n", base, ok)
	base, ok = ports.Topic("orders").DeadLetterOf()
	fmt.Printf("%q %v\n", base, ok)
	// Output:
	// "orders" true
	// "" false
}

func ExampleSubscriptionSpec_WithDefaults() {
	s := ports.SubscriptionSpec{Topic: "readings", Group: "ingest", Batch: ports.BatchSpec{Size: 500}}.WithDefaults()
	fmt.Println(s.InFlight, s.Batch.Window, s.Retry.MaxAttempts, s.Retry.Backoff, s.Validate())
	// Output: 500 100ms 5 100ms <nil>
}

func ExampleRetryPolicy_Delay() {
	p := ports.RetryPolicy{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2, Jitter: 0.0001}.WithDefaults()
	for attempt := 1; attempt <= 5; attempt++ {
		fmt.Print(p.Delay(attempt).Round(10*time.Millisecond), " ")
	}
	fmt.Println()
	// Output: 100ms 200ms 400ms 800ms 1s
}
