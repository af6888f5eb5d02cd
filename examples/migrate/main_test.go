package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/examples/internal/readme"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rabbittest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping RabbitMQ:", err)
		code = max(code, 1)
	}
	if code == 0 {
		// adapters/all (through examples/internal/app) links the RocketMQ
		// client, whose opencensus dependency starts this worker at init,
		// for the process's life.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// list returns the lines of a rabbitmqctl listing, sorted.
func list(t *testing.T, n *rabbittest.Node, what string, cols ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.Ctl(ctx, append([]string{what, "-q", "--no-table-headers"}, cols...)...)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

// added returns the lines of after that are not in before.
func added(before, after []string) []string {
	var out []string
	for _, l := range after {
		if !slices.Contains(before, l) {
			out = append(out, l)
		}
	}
	return out
}

// TestMigrationKeepsEveryPhysicalName runs the migrated program against a
// real RabbitMQ on the topology the legacy program declared, and checks
// with rabbitmqctl that no queue was added or changed (name, durability,
// arguments), that the only exchanges added are sluice's own namespace
// exchanges, and that no binding was added. The program's output is the
// README's expected output.
func TestMigrationKeepsEveryPhysicalName(t *testing.T) {
	n := rabbittest.Shared(t)
	if err := declareLegacy(n.URL); err != nil {
		t.Fatal(err)
	}
	queues := func() []string { return list(t, n, "list_queues", "name", "durable", "auto_delete", "arguments") }
	exchanges := func() []string { return list(t, n, "list_exchanges", "name", "type", "durable", "arguments") }
	bindings := func() []string {
		return list(t, n, "list_bindings", "source_name", "destination_name", "destination_kind", "routing_key", "arguments")
	}
	q0, e0, b0 := queues(), exchanges(), bindings()

	var out strings.Builder
	if err := run(context.Background(), config{url: n.URL, timeout: time.Minute}, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	readme.Check(t, out.String())

	if q1 := queues(); !slices.Equal(q0, q1) {
		t.Fatalf("queues changed:\nbefore %q\nafter  %q", q0, q1)
	}
	if got, want := added(e0, exchanges()), []string{
		"billing-sluice.delay\theaders\ttrue\t[]",
		"billing-sluice.topics\tdirect\ttrue\t[]",
	}; !slices.Equal(got, want) {
		t.Fatalf("exchanges added: %q, want only sluice's namespace exchanges %q", got, want)
	}
	if got := added(b0, bindings()); len(got) > 0 {
		t.Fatalf("bindings added: %q, want none", got)
	}
	for _, b := range bindings() {
		if strings.HasPrefix(b, "dc3.e.billing\t") {
			t.Logf("legacy binding kept: %s", b)
		}
	}
	for _, q := range q0 {
		t.Logf("legacy queue kept: %s", q)
	}
}
