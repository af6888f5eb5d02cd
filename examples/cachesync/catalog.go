package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Entry is one piece of metadata with its version.
type Entry struct {
	Value   string `json:"value"`
	Version int    `json:"version"`
}

// Changed is the broadcast event: key now has Version. It carries no
// value: an instance that needs it reads the catalog, so an event can
// never carry a stale value.
type Changed struct {
	Key     string `json:"key"`
	Version int    `json:"version"`
}

// catalog is the source of truth (a database in a real system).
type catalog struct {
	mu      sync.Mutex
	entries map[string]Entry
}

func newCatalog(initial map[string]string) *catalog {
	c := &catalog{entries: map[string]Entry{}}
	for k, v := range initial {
		c.entries[k] = Entry{Value: v, Version: 1}
	}
	return c
}

// put stores a new value and returns the event announcing it.
func (c *catalog) put(key, value string) Changed {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := Entry{Value: value, Version: c.entries[key].Version + 1}
	c.entries[key] = e
	return Changed{Key: key, Version: e.Version}
}

func (c *catalog) get(key string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e, ok
}

func (c *catalog) snapshot() map[string]Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Entry, len(c.entries))
	for k, e := range c.entries {
		out[k] = e
	}
	return out
}

// describe renders entries as "k v1, k2 v3" in key order.
func describe(m map[string]Entry) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s v%d", k, m[k].Version)
	}
	return strings.Join(parts, ", ")
}
