package tck_test

import (
	"os/exec"
	"strings"
	"testing"
)

// brokerClients are the module paths business-facing packages must never
// depend on.
var brokerClients = []string{
	"github.com/rabbitmq/amqp091-go",
	"github.com/IBM/sarama",
	"github.com/twmb/franz-go",
	"github.com/eclipse/paho.golang",
	"github.com/apache/pulsar-client-go",
	"github.com/ThreeDotsLabs/watermill-amqp",
	"github.com/ThreeDotsLabs/watermill-kafka",
}

// TestCoreImportsNoBrokerClient proves with go list -deps that ports/,
// flow/, operators/ (with operators/schedule) and the portable adapter layer (driver and
// portable) (and everything below them) import no broker client.
func TestCoreImportsNoBrokerClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed for this check: %v", err)
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicemq/sluice/ports/...", "github.com/sluicemq/sluice/flow/...", "github.com/sluicemq/sluice/operators/...",
		"github.com/sluicemq/sluice/adapters/driver/...", "github.com/sluicemq/sluice/adapters/portable/...").CombinedOutput()
	if err != nil {
		// operators/ may be absent on a branch; fall back to what exists.
		out, err = exec.Command("go", "list", "-deps", "github.com/sluicemq/sluice/ports/...", "github.com/sluicemq/sluice/flow/...").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps: %v\n%s", err, out)
		}
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %d packages; the check would prove nothing", len(deps))
	}
	for _, d := range deps {
		for _, c := range brokerClients {
			if strings.HasPrefix(d, c) {
				t.Errorf("core package depends on broker client %s", d)
			}
		}
	}
}

// TestScheduleIsAtTheBottom proves that the one scheduler imports nothing
// of the module but ports, so operators and adapters can both build on it
// without an import loop between their folders.
func TestScheduleIsAtTheBottom(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicemq/sluice/operators/schedule").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/sluicemq/sluice/") && d != "github.com/sluicemq/sluice/ports" && d != "github.com/sluicemq/sluice/operators/schedule" {
			t.Errorf("schedule depends on %s; it must stay below operators and adapters", d)
		}
	}
}
