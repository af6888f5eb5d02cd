package ports_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// TestHeadersSetGetDel: Set replaces a name in place and appends a new
// one, each name once, in the order set; Del gives h new storage, so a
// copy made before keeps its headers.
func TestHeadersSetGetDel(t *testing.T) {
	h := ports.NewHeaders("a", "1", "b", "2", "a", "3")
	if want := ports.NewHeaders("a", "3", "b", "2"); !slices.Equal(h, want) {
		t.Fatalf("NewHeaders with a repeated name = %v, want %v", h, want)
	}
	h.Set("c", "4")
	h.Set("b", "5")
	if h.Get("b") != "5" || h.Get("c") != "4" || h.Get("none") != "" || len(h) != 3 {
		t.Fatalf("after Set: %v", h)
	}
	if v, ok := h.Lookup("a"); !ok || v != "3" {
		t.Fatalf("Lookup(a) = %q, %v", v, ok)
	}
	if _, ok := h.Lookup("none"); ok {
		t.Fatal("Lookup found a name never set")
	}
	before := h
	h.Del("a")
	h.Del("none")
	if _, ok := h.Lookup("a"); ok || len(h) != 2 {
		t.Fatalf("after Del(a): %v", h)
	}
	if want := ports.NewHeaders("a", "3", "b", "5", "c", "4"); !slices.Equal(before, want) {
		t.Fatalf("a copy made before Del changed: %v, want %v", before, want)
	}
	var empty ports.Headers
	empty.Set("x", "1") // the zero value is ready
	if empty.Get("x") != "1" {
		t.Fatalf("Set on nil headers: %v", empty)
	}
}

// TestHeadersCloneMapEqual: Clone shares no storage; Map, HeadersFromMap
// (sorted by name) and Equal (any order) agree.
func TestHeadersCloneMapEqual(t *testing.T) {
	h := ports.NewHeaders("b", "2", "a", "1")
	c := h.Clone()
	c.Set("a", "changed")
	if h.Get("a") != "1" {
		t.Fatalf("Clone shares storage: %v", h)
	}
	if ports.Headers(nil).Clone() != nil || ports.HeadersFromMap(nil) != nil {
		t.Fatal("nil headers cloned or converted to non-nil")
	}
	m := h.Map()
	if len(m) != 2 || m["a"] != "1" || m["b"] != "2" {
		t.Fatalf("Map = %v", m)
	}
	if got := ports.HeadersFromMap(m); !slices.Equal(got, ports.NewHeaders("a", "1", "b", "2")) {
		t.Fatalf("HeadersFromMap = %v, want sorted by name", got)
	}
	if !h.Equal(ports.NewHeaders("a", "1", "b", "2")) || h.Equal(ports.NewHeaders("a", "1")) || h.Equal(ports.NewHeaders("a", "1", "b", "3")) {
		t.Fatal("Equal disagrees")
	}
}

// TestHeadersJSON: headers encode as a JSON object in their order, and
// decode from one (or null), as the map did: stored headers read back.
func TestHeadersJSON(t *testing.T) {
	h := ports.NewHeaders("z", "1", "a", `q"uote`)
	b, err := json.Marshal(struct {
		H ports.Headers `json:"h,omitempty"`
		E ports.Headers `json:"e,omitempty"`
	}{H: h})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"h":{"z":"1","a":"q\"uote"}}`; string(b) != want {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var back struct{ H, N ports.Headers }
	if err := json.Unmarshal([]byte(`{"H":{"z":"1","a":"q\"uote"},"N":null}`), &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.H, h) || back.N != nil {
		t.Fatalf("Unmarshal = %v, %v", back.H, back.N)
	}
	for _, bad := range []string{`["a"]`, `{"a":1}`, `{"a":"1"`} {
		var x ports.Headers
		if err := json.Unmarshal([]byte(bad), &x); err == nil {
			t.Errorf("Unmarshal(%s) accepted", bad)
		}
	}
}

func TestNewHeadersOddPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewHeaders with an odd count did not panic")
		}
	}()
	_ = ports.NewHeaders("a")
}
