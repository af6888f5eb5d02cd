// Package matrix renders the capability matrix, docs/capabilities.md,
// from each adapter's declared Capabilities, the fallbacks the core
// applies for what is missing (adapters.Fallbacks) and the TCK's own list
// of cases with their capability skips (tck.Cases). The table cannot
// drift from the code: TestMatrixUpToDate fails when the file differs
// from what the code renders.
//
// Regenerate after changing an adapter's capabilities or adding one:
//
//	go generate ./tck/matrix
//
// Adding an adapter is one line in [Adapters].
package matrix

//go:generate go run ./gen -out ../../docs/capabilities.md
