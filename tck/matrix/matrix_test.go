package matrix

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

const matrixFile = "../../docs/capabilities.md"

// TestMatrixUpToDate fails when docs/capabilities.md is not what the code
// renders: run `go generate ./tck/matrix`.
func TestMatrixUpToDate(t *testing.T) {
	want := Render(Adapters)
	got, err := os.ReadFile(matrixFile)
	if err != nil {
		t.Fatalf("%v — run `go generate ./tck/matrix`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./tck/matrix` and commit the result\n--- first difference at line %d", matrixFile, firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// Every field of ports.Capabilities has a row, in field order.
func TestEveryCapabilityDescribed(t *testing.T) {
	typ := reflect.TypeFor[ports.Capabilities]()
	if typ.NumField() != len(capabilities) {
		t.Fatalf("ports.Capabilities has %d fields, the matrix describes %d", typ.NumField(), len(capabilities))
	}
	for i := range typ.NumField() {
		if typ.Field(i).Name != capabilities[i].Field {
			t.Errorf("row %d is %s, field %d is %s", i, capabilities[i].Field, i, typ.Field(i).Name)
		}
	}
}

// The rendering shows declared capabilities and the kit's skips.
func TestRenderShowsCapabilitiesAndSkips(t *testing.T) {
	doc := string(Render([]Adapter{
		{Name: "full", Package: "adapters/full", Broker: "x", Caps: ports.Capabilities{Broadcast: true, SubscriptionExpiry: true, DurableGroups: true, PublisherConfirm: true, Ordering: ports.OrderPerKey}},
		{Name: "bare", Package: "adapters/bare", Broker: "y"},
	}))
	for _, want := range []string{
		"| broadcast | `Mode: Broadcast` — every instance gets its own copy | ✓ | — |",
		"| ordering | the delivery order guaranteed | per-key | none |",
		"| `BroadcastInstanceCollision_SecondInstanceRefusedOrReported` | skipped: declares no instance guard",
		"| `Broadcast_EveryInstanceGetsEveryMessage` | runs | skipped: declares no Broadcast capability |",
		"- `confirm`: Send cannot prove",
		"| `bare` | y | `go test ./adapters/bare/ -run TestTCK -v` |",
		"| max message bytes |",
		"| `OversizedPayloadRefused` | skipped: declares no MaxMessageBytes (no payload limit known) | skipped: declares no MaxMessageBytes (no payload limit known) |",
		"| `TenantIsolation` | runs | runs |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("rendering lacks %q", want)
		}
	}
	cases := tck.Cases(ports.Capabilities{})
	if len(cases) < 16+1+10+2 {
		t.Errorf("the kit lists %d cases; want at least SPEC §5's 16, the instance-collision case, the 10 Port cases and the 2 request/batch cases", len(cases))
	}
	for _, c := range cases {
		if !strings.Contains(doc, "| `"+c.Name+"` |") {
			t.Errorf("case %s has no row in the table", c.Name)
		}
	}
}
