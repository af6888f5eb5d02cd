package ports

import (
	"fmt"
	"strings"
)

// Topic is a logical topic name such as "orders" or "billing.invoices",
// optionally scoped to a tenant and namespace as "tenant/namespace/name"
// (see Scope).
//
// Physical names (an exchange and queue, a Kafka topic, a Pulsar persistent
// topic, an MQTT topic) are private to adapters, which derive them with a
// namespace prefix. A name is 1..200 bytes of ASCII letters, digits and
// '.', '-', '_', and does not contain "..". A scoped topic adds a tenant
// and a namespace of 1..63 ASCII letters, digits and '-' each; two
// different logical topics never map to the same physical name on any
// adapter (Topic.Physical gives the flat form prefix-based adapters use).
type Topic string

// DeadLetterSuffix is appended to a topic to name its dead-letter topic.
const DeadLetterSuffix = ".dlq"

// DeadLetterTopic returns the logical dead-letter topic of t ("<t>.dlq",
// in t's scope).
func DeadLetterTopic(t Topic) Topic { return t + DeadLetterSuffix }

// DeadLetterOf returns the topic whose dead-letter topic t is, and
// whether t is one ("<base>.dlq" with a non-empty base; "", false if not).
func (t Topic) DeadLetterOf() (Topic, bool) {
	if base, ok := strings.CutSuffix(string(t), DeadLetterSuffix); ok && base != "" {
		return Topic(base), true
	}
	return "", false
}

// Scope is a tenant and a namespace within it (the design documents'
// "{tenant}/{namespace}/{topic}" naming). Adapters map it natively where
// the broker has the notion (Pulsar tenants and namespaces, MQTT topic
// levels) and as a name prefix elsewhere, so two tenants never share a
// physical name.
type Scope struct {
	Tenant    string
	Namespace string
}

// Topic returns name scoped to s ("tenant/namespace/name"); the zero Scope
// returns name unchanged. Validate the result before use.
func (s Scope) Topic(name string) Topic {
	if s == (Scope{}) {
		return Topic(name)
	}
	return Topic(s.Tenant + "/" + s.Namespace + "/" + name)
}

// IsZero reports whether s is the zero (unscoped) Scope.
func (s Scope) IsZero() bool { return s == Scope{} }

// Split returns t's scope and its name; an unscoped topic has the zero
// Scope. It does not validate t.
func (t Topic) Split() (Scope, string) {
	s := string(t)
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return Scope{}, s
	}
	j := strings.IndexByte(s[i+1:], '/')
	if j < 0 {
		return Scope{}, s
	}
	return Scope{Tenant: s[:i], Namespace: s[i+1 : i+1+j]}, s[i+2+j:]
}

// Physical returns the flat form of t for brokers whose names cannot hold
// a '/' (Kafka, Redis keys, RocketMQ after its own mapping): an unscoped
// topic as it is, a scoped one as tenant, namespace and name joined by
// sep. With sep "..", which no name, tenant or namespace may contain, the
// mapping is one-to-one.
func (t Topic) Physical(sep string) string {
	sc, name := t.Split()
	if sc.IsZero() {
		return name
	}
	return sc.Tenant + sep + sc.Namespace + sep + name
}

// Validate reports whether t is a usable logical topic name.
func (t Topic) Validate() error {
	if len(t) == 0 || len(t) > 200 {
		return fmt.Errorf("%w: topic %q must be 1..200 characters", ErrInvalid, string(t))
	}
	s := string(t)
	if n := strings.Count(s, "/"); n != 0 && n != 2 {
		return fmt.Errorf("%w: topic %q has %d '/': a scoped topic is \"tenant/namespace/name\" (see ports.Scope), an unscoped one has none", ErrInvalid, s, n)
	}
	sc, name := t.Split()
	if !sc.IsZero() {
		for _, part := range []struct{ what, v string }{{"tenant", sc.Tenant}, {"namespace", sc.Namespace}} {
			if len(part.v) == 0 || len(part.v) > 63 {
				return fmt.Errorf("%w: topic %q: %s %q must be 1..63 characters", ErrInvalid, s, part.what, part.v)
			}
			for _, r := range part.v {
				if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
					return fmt.Errorf("%w: topic %q: %s %q has invalid character %q (allowed: ASCII letters, digits, '-')", ErrInvalid, s, part.what, part.v, r)
				}
			}
		}
		if name == "" {
			return fmt.Errorf("%w: topic %q has an empty name after its scope", ErrInvalid, s)
		}
	}
	off := len(s) - len(name)
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%w: topic %q has invalid character %q at byte %d (allowed: ASCII letters, digits, '.', '-', '_')", ErrInvalid, s, r, off+i)
		}
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("%w: topic %q contains \"..\" (reserved: it separates tenant, namespace and name in flat physical names)", ErrInvalid, s)
	}
	return nil
}
