package ports

import (
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
)

// Facts are a delivery's broker-specific facts (partition, offset,
// delivery tag, queue name, ...), for logs and debugging: never needed
// for settlement, and almost never read, so an adapter hands over the
// strings it already has (a FactSource) and no map is built unless a
// reader asks for one (Map).
//
// Facts are read-only and may be shared with other deliveries of the same
// message (broadcast copies, redeliveries). The zero Facts has none. A
// delivery has a handful of facts: Get and Lookup walk them, and Map
// builds a new map for a caller that needs one. Log them with
// slog.Any("facts", d.Facts) (LogValue) or %v (String).
type Facts struct {
	src FactSource
}

// FactSource supplies facts without a map: typically a small struct of
// the strings an adapter has anyway, whose Facts method yields the
// non-empty ones as key/value pairs, in the same order on every call, and
// stops when yield returns false. A FactSource handed to NewFacts must not
// change afterwards.
type FactSource interface {
	Facts(yield func(key, value string) bool)
}

// NewFacts returns the facts src yields (none when src is nil).
func NewFacts(src FactSource) Facts {
	if m, ok := src.(FactMap); ok && len(m) == 0 {
		return Facts{}
	}
	return Facts{src: src}
}

// FactMap is a FactSource for an open set of facts (broker headers, say):
// NewFacts(FactMap(m)) allocates nothing, and then m must not change. It
// yields in key order.
type FactMap map[string]string

// Facts yields m's entries in key order.
func (m FactMap) Facts(yield func(key, value string) bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !yield(k, m[k]) {
			return
		}
	}
}

// Get returns the fact named key, "" when there is none.
func (f Facts) Get(key string) string {
	v, _ := f.Lookup(key)
	return v
}

// Lookup returns the fact named key and whether there is one.
func (f Facts) Lookup(key string) (value string, ok bool) {
	switch src := f.src.(type) {
	case nil:
		return "", false
	case FactMap:
		value, ok = src[key]
		return value, ok
	}
	f.src.Facts(func(k, v string) bool {
		if k == key {
			value, ok = v, true
		}
		return !ok
	})
	return value, ok
}

// All returns an iterator over the facts, in the same order every time for
// one source.
func (f Facts) All() iter.Seq2[string, string] {
	return func(yield func(key, value string) bool) {
		if f.src != nil {
			f.src.Facts(yield)
		}
	}
}

// Len returns how many facts there are.
func (f Facts) Len() int {
	switch src := f.src.(type) {
	case nil:
		return 0
	case FactMap:
		return len(src)
	}
	n := 0
	f.src.Facts(func(string, string) bool { n++; return true })
	return n
}

// Map returns the facts in a new map (nil when there are none), which the
// caller may change.
func (f Facts) Map() map[string]string {
	var m map[string]string
	for k, v := range f.All() {
		if m == nil {
			m = make(map[string]string, 8)
		}
		m[k] = v
	}
	return m
}

// LogValue returns the facts as a slog group, in the order All yields
// them.
func (f Facts) LogValue() slog.Value {
	var attrs []slog.Attr
	for k, v := range f.All() {
		attrs = append(attrs, slog.String(k, v))
	}
	return slog.GroupValue(attrs...)
}

// String returns the facts as space-separated key=value pairs, in the
// order All yields them; a value that is empty or holds a space, a quote
// or an equals sign is quoted.
func (f Facts) String() string {
	var b strings.Builder
	for k, v := range f.All() {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			b.WriteString(strconv.Quote(v))
		} else {
			b.WriteString(v)
		}
	}
	return b.String()
}
