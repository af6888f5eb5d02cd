package kit

import "github.com/sluicemq/sluice/ports"

// Rule is one check of an options validation: Broken when the options
// break it; Field and Reason then make the *ports.ValueError.
type Rule struct {
	Broken        bool
	Field, Reason string
}

// FirstBroken returns a *ports.ValueError for the first broken rule, its
// Field prefixed with prefix (such as "kafka.Options."), or nil.
func FirstBroken(prefix string, rules ...Rule) error {
	for _, r := range rules {
		if r.Broken {
			return &ports.ValueError{Field: prefix + r.Field, Reason: r.Reason}
		}
	}
	return nil
}
