package kit_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestCheckExisting(t *testing.T) {
	if err := kit.CheckExistingNames("x.Streams", map[ports.Topic]string{"orders": "legacy:orders"}); err != nil {
		t.Fatalf("a valid name: %v", err)
	}
	if err := kit.CheckExistingGroups("x.Groups", map[kit.ExistingGroup]string{{Topic: "orders", Group: "billing"}: "legacy-billing"}); err != nil {
		t.Fatalf("a valid group: %v", err)
	}
	for name, err := range map[string]error{
		"empty name":          kit.CheckExistingNames("x.Streams", map[ports.Topic]string{"orders": ""}),
		"invalid topic":       kit.CheckExistingNames("x.Streams", map[ports.Topic]string{"": "s"}),
		"no group":            kit.CheckExistingGroups("x.Groups", map[kit.ExistingGroup]string{{Topic: "orders"}: "g"}),
		"no group name":       kit.CheckExistingGroups("x.Groups", map[kit.ExistingGroup]string{{Topic: "orders", Group: "g"}: ""}),
		"invalid group topic": kit.CheckExistingGroups("x.Groups", map[kit.ExistingGroup]string{{Group: "g"}: "g"}),
	} {
		var ve *ports.ValueError
		if !errors.As(err, &ve) || !errors.Is(err, ports.ErrInvalid) || ve.Field[:2] != "x." {
			t.Errorf("%s: %v, want a *ports.ValueError for its field", name, err)
		}
	}
}

func TestInvalid(t *testing.T) {
	bad := kit.Invalid("x.Options.")
	var ve *ports.ValueError
	if err := bad("N", "%d is 100%% too many", 3); !errors.As(err, &ve) || ve.Field != "x.Options.N" || ve.Reason != "3 is 100% too many" {
		t.Errorf("Invalid with args = %#v", err)
	}
	if err := bad("N", "50% off"); !errors.As(err, &ve) || ve.Reason != "50% off" {
		t.Errorf("Invalid without args = %#v, want the reason as it is", err)
	}
}
