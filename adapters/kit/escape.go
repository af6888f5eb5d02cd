package kit

import "strings"

// EscapeByte maps a name one-to-one onto a name without the byte c, for a
// broker that forbids c in names or takes it for another character (Kafka
// reads '.' and '_' in a topic name as one): c becomes esc followed by
// sub, and an esc followed by esc, sub or c becomes esc twice. A name that
// holds no c and no esc followed by esc or sub is returned unchanged.
func EscapeByte(s string, c, esc, sub byte) string {
	if !strings.ContainsRune(s, rune(c)) && !strings.Contains(s, string([]byte{esc, esc})) && !strings.Contains(s, string([]byte{esc, sub})) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == c:
			b.WriteByte(esc)
			b.WriteByte(sub)
		case s[i] == esc && i+1 < len(s) && (s[i+1] == esc || s[i+1] == sub || s[i+1] == c):
			b.WriteByte(esc)
			b.WriteByte(esc)
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
