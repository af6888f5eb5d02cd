package kit_test

import (
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestKeyHoldOneOutPerKey(t *testing.T) {
	var k kit.KeyHold[int]
	for i, key := range []string{"a", "b", "a", "", "a", ""} {
		out := k.Admit(key, &i)
		if want := i != 2 && i != 4; out != want {
			t.Fatalf("Admit(%q, %d) = %v, want %v", key, i, out, want)
		}
	}
	if k.Waiting() != 2 {
		t.Fatalf("Waiting %d, want 2", k.Waiting())
	}
	if next, ok := k.Release("a"); !ok || next != 2 {
		t.Fatalf("Release(a) = %d, %v, want 2, true", next, ok)
	}
	if next, ok := k.Release("a"); !ok || next != 4 {
		t.Fatalf("Release(a) = %d, %v, want 4, true", next, ok)
	}
	if _, ok := k.Release("a"); ok {
		t.Fatal("Release(a) with none waiting returned one")
	}
	if six, seven := 6, 7; !k.Admit("a", &six) || k.Admit("a", &seven) {
		t.Fatal("a released: the next goes out, the one after waits")
	}
	if _, ok := k.Release(""); ok || k.Waiting() != 1 {
		t.Fatalf("Release of the empty key: %v, waiting %d", ok, k.Waiting())
	}
}

// BenchmarkKeyHoldDistinctKeys: a record admitted and the one 200 before
// released per operation, every key distinct (a keyed topic's usual case).
func BenchmarkKeyHoldDistinctKeys(b *testing.B) {
	var k kit.KeyHold[int]
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = strconv.Itoa(1_000_000 + i)
	}
	for i := range 200 {
		k.Admit(keys[i], &i)
	}
	i := 200
	for b.Loop() {
		k.Admit(keys[i%len(keys)], &i)
		k.Release(keys[(i-200)%len(keys)])
		i++
	}
}
