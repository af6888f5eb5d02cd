package tck

import "github.com/sluicemq/sluice/ports"

// Case names one case of the kit and whether an adapter with given
// capabilities runs it. The capability matrix (docs/capabilities.md) is
// rendered from it, so the documented skips are the kit's own.
type Case struct {
	// Name is the subtest name, as in go test output.
	Name string
	// Skip is why the case is skipped for the capabilities asked about,
	// or "" when it runs.
	Skip string
}

// Cases lists the kit's cases in the order Run runs them, each with its
// skip reason for an adapter declaring caps.
func Cases(caps ports.Capabilities) []Case {
	out := make([]Case, len(cases))
	for i, c := range cases {
		out[i] = Case{Name: c.name}
		if c.needs != nil {
			out[i].Skip = c.needs(caps)
		}
	}
	return out
}
