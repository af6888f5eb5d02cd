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
	n := &conn{opts: Options{Namespace: "sluice"}}
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

// logical returns the logical topic of a physical one.
func (c *conn) logical(phys string) ports.Topic {
	if c.opts.Existing != nil {
		for t, p := range c.opts.Existing.Topics {
			if p == phys {
				return t
			}
		}
	}
	flat := unescapeUnderscore(strings.TrimPrefix(phys, c.opts.Namespace+"."))
	if parts := strings.Split(flat, ".."); len(parts) == 3 {
		return ports.Scope{Tenant: parts[0], Namespace: parts[1]}.Topic(parts[2])
	}
	return ports.Topic(flat)
}

// unescapeUnderscore inverts escapeUnderscore.
func unescapeUnderscore(s string) string {
	if !strings.Contains(s, "-") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && i+1 < len(s) {
			switch s[i+1] {
			case '-':
				b.WriteByte('-')
				i++
				continue
			case 'u':
				b.WriteByte('_')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
