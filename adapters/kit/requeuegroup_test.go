package kit_test

import (
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// TestRequeueGroup: a copy addressed to group a is a's (the mark removed)
// and foreign to b; a record without the mark is every group's.
func TestRequeueGroup(t *testing.T) {
	msgs := []ports.Message{{Headers: ports.NewHeaders("x", "1")}, {Headers: ports.Headers{}}}
	kit.AddressCopies(msgs, "a")
	for _, m := range msgs {
		if m.Headers.Get(kit.HeaderRequeueGroup) != "a" {
			t.Fatalf("headers %v, want the copy addressed to a", m.Headers)
		}
	}
	if kit.ForeignCopy(&msgs[0].Headers, "a") {
		t.Fatal("a's copy is foreign to a")
	}
	if _, ok := msgs[0].Headers.Lookup(kit.HeaderRequeueGroup); ok || msgs[0].Headers.Get("x") != "1" {
		t.Fatalf("headers %v, want the mark removed and x kept", msgs[0].Headers)
	}
	if !kit.ForeignCopy(&msgs[1].Headers, "b") {
		t.Fatal("a's copy is not foreign to b")
	}
	if orig := ports.NewHeaders("x", "1"); kit.ForeignCopy(&orig, "b") {
		t.Fatal("an original is foreign")
	}
}
