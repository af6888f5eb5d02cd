package kit_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestFirstBrokenReportsTheFirstBrokenRule(t *testing.T) {
	err := kit.FirstBroken("x.Options.",
		kit.Rule{Broken: false, Field: "A", Reason: "kept"},
		kit.Rule{Broken: true, Field: "B", Reason: "is required"},
		kit.Rule{Broken: true, Field: "C", Reason: "later"})
	var ve *ports.ValueError
	if !errors.As(err, &ve) || ve.Field != "x.Options.B" || ve.Reason != "is required" || !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("FirstBroken = %v, want x.Options.B is required (ErrInvalid)", err)
	}
	if err := kit.FirstBroken("x.", kit.Rule{Field: "A", Reason: "kept"}); err != nil {
		t.Fatalf("FirstBroken with no broken rule = %v", err)
	}
}
