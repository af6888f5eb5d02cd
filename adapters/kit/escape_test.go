package kit_test

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestEscapeByteIsOneToOne: every name over an alphabet of the escaped
// byte, the escape, its substitute and others (up to 6 bytes) maps to a
// name without the byte, distinct from every other name's, and decodes
// back; names without the byte or an escape sequence are unchanged.
func TestEscapeByteIsOneToOne(t *testing.T) {
	escape := func(s string) string { return kit.EscapeByte(s, '_', '-', 'u') }
	seen := map[string]string{}
	var gen func(prefix string)
	gen = func(prefix string) {
		got := escape(prefix)
		if strings.Contains(got, "_") {
			t.Fatalf("%q → %q holds the byte", prefix, got)
		}
		if other, ok := seen[got]; ok {
			t.Fatalf("%q and %q both map to %q", other, prefix, got)
		}
		seen[got] = prefix
		if back := unescape(got); back != prefix {
			t.Fatalf("%q → %q → %q", prefix, got, back)
		}
		if len(prefix) < 6 {
			for _, c := range []string{"a", "u", ".", "-", "_"} {
				gen(prefix + c)
			}
		}
	}
	gen("")
	for _, s := range []string{"billing.invoices-v2", "a-b", "-x-"} {
		if got := escape(s); got != s {
			t.Fatalf("%q changed to %q", s, got)
		}
	}
}

// unescape inverts kit.EscapeByte(s, '_', '-', 'u').
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && i+1 < len(s) && (s[i+1] == '-' || s[i+1] == 'u') {
			b.WriteByte(map[byte]byte{'-': '-', 'u': '_'}[s[i+1]])
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
