package portable_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// DeclareGroup validates the topic and the group before the driver sees
// them: a driver's DeclareGroup does not check them again.
func TestDeclareGroupValidates(t *testing.T) {
	ctx, b, a := newToy(t)
	for _, c := range []struct {
		topic ports.Topic
		group string
	}{{"", "g"}, {"t", ""}, {"bad topic", "g"}} {
		if err := a.DeclareGroup(ctx, c.topic, c.group); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("DeclareGroup(%q, %q) = %v, want ports.ErrInvalid", c.topic, c.group, err)
		}
	}
	b.mu.Lock()
	n := len(b.queues)
	b.mu.Unlock()
	if n != 0 {
		t.Fatalf("the driver declared %d queue(s) for invalid names", n)
	}
	if err := a.DeclareGroup(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}
}
