package kafka

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// TestPhysicalNamesAreOneToOneAndNeverCollide: every pair of distinct
// logical topics (scoped and unscoped, with '.', '-', '_' in every
// position) gets distinct physical names, no physical name holds '_' (so
// no two collide under Kafka's '.'≡'_' rule), each maps back to its
// logical topic, and names without '_' are unchanged.
func TestPhysicalNamesAreOneToOneAndNeverCollide(t *testing.T) {
	n := names{ns: "sluice"}
	alphabet := []string{"a", "u", ".", "-", "_"}
	var topics []ports.Topic
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		if prefix != "" {
			topics = append(topics, ports.Topic(prefix))
			for _, sc := range []ports.Scope{{Tenant: "t", Namespace: "n"}, {Tenant: "t-u", Namespace: "n"}, {Tenant: "t", Namespace: "-u"}} {
				topics = append(topics, sc.Topic(prefix))
			}
		}
		if depth == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, depth-1)
		}
	}
	gen("", 4)
	seen := map[string]ports.Topic{}
	checked := 0
	for _, tp := range topics {
		if tp.Validate() != nil {
			continue
		}
		checked++
		p := n.topic(tp)
		if strings.Contains(p, "_") {
			t.Fatalf("%q → %q holds '_'", tp, p)
		}
		key := strings.ReplaceAll(p, "_", ".")
		if other, ok := seen[key]; ok {
			t.Fatalf("%q and %q both map to %q", other, tp, p)
		}
		seen[key] = tp
		if back := n.logical(p); back != tp {
			t.Fatalf("%q → %q → %q", tp, p, back)
		}
	}
	if got := n.topic("billing.invoices-v2"); got != "sluice.billing.invoices-v2" {
		t.Fatalf("a name without '_' changed: %q", got)
	}
	t.Logf("%d valid logical topics, all distinct physical names", checked)
}
