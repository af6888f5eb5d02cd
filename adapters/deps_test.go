package adapters_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// brokerModules are the broker clients (and Watermill's broker modules) a
// program must link only when it imports the adapter that needs them.
var brokerModules = []string{
	"github.com/IBM/sarama",
	"github.com/rabbitmq/amqp091-go",
	"github.com/eclipse/paho",
	"github.com/apache/pulsar-client-go",
	"github.com/twmb/franz-go",
	"github.com/go-stomp/stomp",
	"github.com/redis/go-redis",
	"github.com/apache/rocketmq-client-go",
	"github.com/ThreeDotsLabs/watermill",
}

// A program on the embedded default imports the registry and adapters/mem
// (or adapters/mem alone) with flow and ports: it must link no broker
// client. Package adapters imports no adapter; each adapter package
// registers its schemes when it is imported.
func TestMemProgramLinksNoBrokerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, set := range [][]string{
		{"./adapters"},
		{"./adapters/mem"},
		{"./adapters", "./adapters/mem", "./flow", "./ports"},
	} {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-deps"}, set...)...)
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %v: %v\n%s", set, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			for _, m := range brokerModules {
				if strings.HasPrefix(pkg, m) { // also watermill-amqp, paho.golang, …
					t.Errorf("a program importing %v links %s (from module %s): package adapters must import no adapter, and an adapter package only its own broker client", set, pkg, m)
				}
			}
		}
	}
}

// The layer under every adapter — the driver contract, the portable Port
// and the kit — stands on ports and the scheduler alone: it imports
// neither the URL registry nor any broker client, so the registry can use
// it and a driver outside this module can too.
func TestPortableLayerStandsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "./adapters/driver", "./adapters/portable", "./adapters/kit")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/sluicemq/sluice/adapters" {
			t.Errorf("the portable layer imports the URL registry (package adapters)")
		}
		for _, m := range brokerModules {
			if strings.HasPrefix(pkg, m) {
				t.Errorf("the portable layer links %s", pkg)
			}
		}
	}
}
