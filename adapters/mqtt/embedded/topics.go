package embedded

import (
	"strings"
	"unicode/utf8"
)

// validTopic reports whether name may be published to: not empty, valid
// UTF-8, no wildcard and no NUL [MQTT-3.3.2-2].
func validTopic(name string) bool {
	return name != "" && utf8.ValidString(name) && !strings.ContainsAny(name, "+#\x00")
}

// splitShare splits "$share/<name>/<filter>" into the share name and the
// filter; a plain filter has no share name. ok is false for a malformed
// shared filter.
func splitShare(filter string) (share, plain string, ok bool) {
	rest, shared := strings.CutPrefix(filter, "$share/")
	if !shared {
		return "", filter, true
	}
	share, plain, found := strings.Cut(rest, "/")
	if !found || share == "" || strings.ContainsAny(share, "+#") || plain == "" {
		return "", "", false
	}
	return share, plain, true
}

// validFilter reports whether filter is a well-formed topic filter, shared
// or not: '#' only as the last level and alone in it, '+' alone in its
// level [MQTT-4.7.1].
func validFilter(filter string) bool {
	if !utf8.ValidString(filter) || strings.ContainsRune(filter, 0) {
		return false
	}
	_, f, ok := splitShare(filter)
	if !ok || f == "" {
		return false
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return false
		case l != "#" && l != "+" && strings.ContainsAny(l, "+#"):
			return false
		}
	}
	return true
}

// node is one level of the subscription tree: the filters that end here
// hang on it, their further levels below.
type node struct {
	parent   *node
	key      string
	children map[string]*node
	plain    map[*session]*sub // plain subscriptions to the filter ending here
	groups   map[string]*group // shared subscriptions to it, by share name
}

func newNode(parent *node, key string) *node {
	return &node{parent: parent, key: key, children: map[string]*node{}, plain: map[*session]*sub{}, groups: map[string]*group{}}
}

// insert returns the node of filter f, making the missing levels.
func (n *node) insert(f string) *node {
	for _, l := range strings.Split(f, "/") {
		c := n.children[l]
		if c == nil {
			c = newNode(n, l)
			n.children[l] = c
		}
		n = c
	}
	return n
}

// prune removes n and its empty ancestors from the tree.
func (n *node) prune() {
	for n.parent != nil && len(n.children) == 0 && len(n.plain) == 0 && len(n.groups) == 0 {
		delete(n.parent.children, n.key)
		n = n.parent
	}
}

// match calls visit with every node whose filter matches the topic of
// levels. A topic starting with '$' is not matched by a filter starting
// with a wildcard [MQTT-4.7.2-1].
func (n *node) match(levels []string, visit func(*node)) {
	n.matchFrom(levels, 0, strings.HasPrefix(levels[0], "$"), visit)
}

func (n *node) matchFrom(levels []string, i int, dollar bool, visit func(*node)) {
	wild := !(dollar && i == 0)
	if wild {
		if c := n.children["#"]; c != nil {
			visit(c) // "a/#" matches "a" too
		}
	}
	if i == len(levels) {
		visit(n)
		return
	}
	if c := n.children[levels[i]]; c != nil {
		c.matchFrom(levels, i+1, dollar, visit)
	}
	if wild {
		if c := n.children["+"]; c != nil {
			c.matchFrom(levels, i+1, dollar, visit)
		}
	}
}
