package kit

// maxNames bounds the names a Names keeps: past it a new name is a string
// of its own.
const maxNames = 256

// Names interns the names a record decoder meets again and again (header
// keys): Intern returns the same string for the same bytes, so a record
// costs no string per header key. The zero value is ready; it is not safe
// for concurrent use (one per partition or decoder).
type Names struct{ m map[string]string }

// Intern returns b as a string, the one it returned before for the same
// bytes while fewer than 256 names are kept.
func (n *Names) Intern(b []byte) string {
	if s, ok := n.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if n.m == nil {
		n.m = map[string]string{}
	}
	if len(n.m) < maxNames {
		n.m[s] = s
	}
	return s
}
