package activemq

import "testing"

// escape is injective and never yields the instance separator "__" or a
// destination wildcard.
func TestEscape(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"", "a", "a.b", "a_b", "a_2eb", "a__b", "g-1", "x*y", "x>y", "a b", "é", "__", "_"} {
		e := escape(s)
		if prev, dup := seen[e]; dup {
			t.Errorf("escape(%q) = escape(%q) = %q", s, prev, e)
		}
		seen[e] = s
		for _, bad := range []string{"__", ".", "*", ">", ",", "/", " "} {
			if contains(e, bad) {
				t.Errorf("escape(%q) = %q contains %q", s, e, bad)
			}
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
