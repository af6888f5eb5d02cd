package ports_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// pairFacts is a FactSource of fixed fields, as an adapter writes one.
type pairFacts struct{ queue, tag string }

func (f *pairFacts) Facts(yield func(key, value string) bool) {
	_ = yield("queue", f.queue) && (f.tag == "" || yield("tag", f.tag))
}

func keys(f ports.Facts) []string {
	var ks []string
	for k := range f.All() {
		ks = append(ks, k)
	}
	return ks
}

// TestFactsZero: the zero Facts, and those of a nil or empty source,
// have none.
func TestFactsZero(t *testing.T) {
	for _, f := range []ports.Facts{{}, ports.NewFacts(nil), ports.NewFacts(ports.FactMap(nil)), ports.NewFacts(ports.FactMap{})} {
		if v, ok := f.Lookup("queue"); ok || v != "" || f.Get("queue") != "" || f.Len() != 0 || f.Map() != nil || keys(f) != nil || f.String() != "" {
			t.Errorf("%#v: not empty", f)
		}
		if v := f.LogValue(); v.Kind() != slog.KindGroup || len(v.Group()) != 0 {
			t.Errorf("%#v: log value %v", f, v)
		}
	}
}

// TestFactsSource: a struct source is read through every accessor in its
// own order, and a walk stops where the reader stops.
func TestFactsSource(t *testing.T) {
	f := ports.NewFacts(&pairFacts{queue: "orders", tag: "a b"})
	if v, ok := f.Lookup("tag"); !ok || v != "a b" || f.Get("queue") != "orders" || f.Get("none") != "" || f.Len() != 2 {
		t.Fatalf("lookups on %s", f)
	}
	if _, ok := f.Lookup("none"); ok {
		t.Fatal("Lookup found an absent fact")
	}
	if got := keys(f); !slices.Equal(got, []string{"queue", "tag"}) {
		t.Fatalf("All yields %v", got)
	}
	n := 0
	for range f.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("a walk broken off after one went on to %d", n)
	}
	m := f.Map()
	if !maps.Equal(m, map[string]string{"queue": "orders", "tag": "a b"}) {
		t.Fatalf("Map = %v", m)
	}
	m["queue"] = "changed"
	if f.Get("queue") != "orders" {
		t.Fatal("changing Map's result changed the facts")
	}
	if got := f.String(); got != `queue=orders tag="a b"` {
		t.Fatalf("String = %s", got)
	}
	if got := ports.NewFacts(&pairFacts{queue: "q"}); got.Len() != 1 || got.String() != "queue=q" {
		t.Fatalf("facts without a tag: %s", got)
	}
}

// TestFactMap: a map's facts walk in key order, and wrapping it costs
// no allocation.
func TestFactMap(t *testing.T) {
	m := ports.FactMap{"x-death": "1", "queue": "orders", "exchange": ""}
	f := ports.NewFacts(m)
	if got := keys(f); !slices.Equal(got, []string{"exchange", "queue", "x-death"}) {
		t.Fatalf("All yields %v", got)
	}
	if v, ok := f.Lookup("exchange"); !ok || v != "" || f.Len() != 3 || f.Get("x-death") != "1" {
		t.Fatalf("lookups on %s", f)
	}
	if got := f.String(); got != `exchange="" queue=orders x-death=1` {
		t.Fatalf("String = %s", got)
	}
	var sink ports.Facts
	if n := testing.AllocsPerRun(100, func() { sink = ports.NewFacts(m) }); n != 0 {
		t.Fatalf("NewFacts(FactMap) allocates %v times", n)
	}
	_ = sink
}

// TestFactsLog: slog.Any logs the facts as a group, %v as key=value pairs.
func TestFactsLog(t *testing.T) {
	var b bytes.Buffer
	d := ports.Delivery{Facts: ports.NewFacts(&pairFacts{queue: "orders", tag: "7"})}
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})).Info("got", slog.Any("facts", d.Facts))
	if got := strings.TrimSpace(b.String()); got != "level=INFO msg=got facts.queue=orders facts.tag=7" {
		t.Fatalf("logged %q", got)
	}
	b.Reset()
	slog.New(slog.NewJSONHandler(&b, nil)).Info("got", "facts", d.Facts)
	if !strings.Contains(b.String(), `"facts":{"queue":"orders","tag":"7"}`) {
		t.Fatalf("logged %s", b.String())
	}
	if got := fmt.Sprintf("%v", d.Facts); got != "queue=orders tag=7" {
		t.Fatalf("%%v = %s", got)
	}
}
