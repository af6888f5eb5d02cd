package matrix

import (
	"github.com/sluicemq/sluice/adapters/mem"
)

// Adapters are the rows of the matrix, one line per adapter: its name, its
// package, what its TCK runs against, and its declared capabilities.
var Adapters = []Adapter{
	{Name: "mem", Package: "adapters/mem", Broker: "the in-process broker", Caps: new(mem.Adapter).Capabilities()},
}
