package kit_test

import (
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestOriginalsKeptUntilTheLastHolderLetsGo(t *testing.T) {
	var o kit.Originals[[]string]
	if _, ok := o.Lookup("id-1"); ok {
		t.Fatal("Lookup on the zero value found something")
	}
	o.Hold("id-1", []string{"a", "1"})
	o.Hold("id-1", []string{"other"}) // a second delivery of the same message
	o.Release("id-1")
	if v, ok := o.Lookup("id-1"); !ok || len(v) != 2 || v[0] != "a" {
		t.Fatalf("with one holder left: Lookup = %v, %v, want the first holder's original", v, ok)
	}
	o.Release("id-1")
	o.Release("id-1") // one release too many changes nothing
	if _, ok := o.Lookup("id-1"); ok {
		t.Fatal("an original outlived its last holder")
	}
	o.Hold("id-1", []string{"again"})
	if v, _ := o.Lookup("id-1"); len(v) != 1 || v[0] != "again" {
		t.Fatalf("held again after it was forgotten: %v", v)
	}
}
