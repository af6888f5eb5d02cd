package ports_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

func TestScopedTopics(t *testing.T) {
	sc := ports.Scope{Tenant: "acme", Namespace: "billing"}
	top := sc.Topic("invoices")
	if top != "acme/billing/invoices" {
		t.Fatalf("Scope.Topic = %q", top)
	}
	if err := top.Validate(); err != nil {
		t.Fatalf("Validate(%q): %v", top, err)
	}
	got, name := top.Split()
	if got != sc || name != "invoices" {
		t.Fatalf("Split = %+v %q", got, name)
	}
	if p := top.Physical(".."); p != "acme..billing..invoices" {
		t.Fatalf("Physical = %q", p)
	}
	if p := ports.Topic("orders").Physical(".."); p != "orders" {
		t.Fatalf("unscoped Physical = %q", p)
	}
	if d := ports.DeadLetterTopic(top); d.Validate() != nil || d != "acme/billing/invoices.dlq" {
		t.Fatalf("dead-letter topic %q: %v", d, d.Validate())
	}
	if (ports.Scope{}).Topic("x") != "x" {
		t.Fatal("zero scope must leave the name alone")
	}
}

func TestTopicValidateRefusesAmbiguousNames(t *testing.T) {
	for _, bad := range []ports.Topic{
		"a/b", "a/b/c/d", "/b/c", "a//c", "a/b/", "a.b/ns/x", "a/n_s/x",
		"orders..eu", // ".." is the flat separator
		"a/b/c..d",
		ports.Topic("ünïcode"),
	} {
		err := bad.Validate()
		if !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Validate(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	err := ports.Topic("ünïcode").Validate()
	if err == nil || !strings.Contains(err.Error(), "'ü'") {
		t.Errorf("non-ASCII topic error should name the rune: %v", err)
	}
	// Distinct logical topics never share a flat physical name.
	seen := map[string]ports.Topic{}
	for _, tp := range []ports.Topic{"a.b.c", "a/b/c", "a-b/c/d", "a/b-c/d", "a/b/c-d", "x-y/z/w"} {
		if err := tp.Validate(); err != nil {
			t.Fatalf("Validate(%q): %v", tp, err)
		}
		p := tp.Physical("..")
		if other, dup := seen[p]; dup {
			t.Fatalf("%q and %q share physical %q", tp, other, p)
		}
		seen[p] = tp
	}
}

func TestQoSAndStart(t *testing.T) {
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g", QoS: ports.ExactlyOnce}
	err := spec.Validate()
	if !errors.Is(err, ports.ErrUnsupported) || !errors.Is(err, ports.ErrExactlyOnce) {
		t.Fatalf("ExactlyOnce spec: %v, want ErrExactlyOnce (ErrUnsupported)", err)
	}
	m := ports.Message{Topic: "t", QoS: ports.ExactlyOnce}
	if err := m.Validate(); !errors.Is(err, ports.ErrExactlyOnce) {
		t.Fatalf("ExactlyOnce message: %v", err)
	}
	spec = ports.SubscriptionSpec{Topic: "t", Group: "g", QoS: ports.QoS(9)}
	if err := spec.Validate(); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("unknown QoS: %v", err)
	}
	spec = ports.SubscriptionSpec{Topic: "t", Group: "g", Start: ports.StartPosition(7)}
	if err := spec.Validate(); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("unknown start: %v", err)
	}
	spec = ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, SingleActive: true}
	if err := spec.Validate(); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("single-active broadcast: %v", err)
	}
	ok := ports.SubscriptionSpec{Topic: "t", Group: "g", QoS: ports.BestEffort, Start: ports.StartEarliest, SingleActive: true}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckSize(t *testing.T) {
	m := ports.Message{Topic: "t", Payload: make([]byte, 100)}
	if err := m.CheckSize(100, 0); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if err := m.CheckSize(0, 0); err != nil {
		t.Fatalf("no limit: %v", err)
	}
	err := m.CheckSize(120, 30)
	var se *ports.SizeError
	if !errors.As(err, &se) || se.Size != 130 || se.Limit != 120 || !se.Envelope {
		t.Fatalf("CheckSize = %v (%+v)", err, se)
	}
	if !errors.Is(err, ports.ErrInvalid) || !errors.Is(err, ports.ErrTooLarge) || errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("a size error is invalid input, never unconfirmed: %v", err)
	}
	if !strings.Contains(err.Error(), "with its envelope") {
		t.Fatalf("the error must say what it counted: %v", err)
	}
}

func TestTopicSpecValidate(t *testing.T) {
	for _, bad := range []ports.TopicSpec{
		{},
		{Topic: "t", Retention: -time.Second},
		{Topic: "t", Retention: time.Microsecond},
		{Topic: "t", MaxLength: -1},
		{Topic: "t", Groups: []string{""}},
		{Topic: "t", Groups: []string{"a", "a"}},
		{Topic: "t", QoS: ports.ExactlyOnce},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
	if err := (ports.TopicSpec{Topic: "acme/iot/state", Retention: 30 * time.Second, Groups: []string{"a", "b"}}).Validate(); err != nil {
		t.Fatal(err)
	}
	re := &ports.RedeclareError{Name: "orders", Diffs: []string{"x-queue-type: existing classic, declared quorum"}}
	if !errors.Is(re, ports.ErrInvalid) || !strings.Contains(re.Error(), "x-queue-type") {
		t.Fatalf("RedeclareError: %v", re)
	}
}

func TestRegistry(t *testing.T) {
	state := ports.TopicSpec{Topic: "acme/iot/state", Retention: 30 * time.Second, QoS: ports.BestEffort}
	tasks := ports.TopicSpec{Topic: "tasks", Retention: 24 * time.Hour, Groups: []string{"workers"}}
	r, err := ports.NewRegistry(state, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(ports.TopicSpec{Topic: "tasks", Retention: 24 * time.Hour, Groups: []string{"workers"}}); err != nil {
		t.Fatalf("same spec again: %v", err)
	}
	err = r.Add(ports.TopicSpec{Topic: "tasks", Retention: time.Hour, Groups: []string{"workers", "audit"}})
	var re *ports.RedeclareError
	if !errors.As(err, &re) || len(re.Diffs) != 2 || !strings.Contains(re.Error(), "Retention") || !strings.Contains(re.Error(), "Groups") {
		t.Fatalf("redeclare: %v", err)
	}
	if got, _ := r.Lookup("tasks"); got.Retention != 24*time.Hour {
		t.Fatalf("a refused redeclare changed the registry: %+v", got)
	}
	spec, err := r.Subscription("acme/iot/state", "dash")
	if err != nil || spec.QoS != ports.BestEffort || spec.Group != "dash" {
		t.Fatalf("Subscription = %+v, %v", spec, err)
	}
	if _, err := r.Subscription("takss", "g"); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "not in the registry") {
		t.Fatalf("unregistered topic: %v", err)
	}
	if b, err := r.Broadcast("tasks", "g", "i-1"); err != nil || b.Mode != ports.Broadcast || b.Instance != "i-1" {
		t.Fatalf("Broadcast = %+v, %v", b, err)
	}
	if m, err := r.Message("acme/iot/state", []byte(`{}`)); err != nil || m.QoS != ports.BestEffort {
		t.Fatalf("Message = %+v, %v", m, err)
	}
	if ts := r.Topics(); len(ts) != 2 || ts[0].Topic != "acme/iot/state" {
		t.Fatalf("Topics = %+v", ts)
	}

	var sent []ports.Message
	s := r.Sender(senderFunc(func(msgs ...ports.Message) error { sent = append(sent, msgs...); return nil }))
	err = s.Send(t.Context(), ports.Message{Topic: "tasks"}, ports.Message{Topic: "nope"})
	if len(ports.SendErrors(err)) != 1 || len(sent) != 0 {
		t.Fatalf("an unregistered topic must refuse the whole Send: err=%v sent=%d", err, len(sent))
	}
	in := []ports.Message{{Topic: "acme/iot/state"}}
	if err := s.Send(t.Context(), in...); err != nil || sent[0].QoS != ports.BestEffort || in[0].QoS != ports.AtLeastOnce {
		t.Fatalf("Send: %v, sent %+v, caller's message %+v", err, sent, in[0])
	}
}

type senderFunc func(msgs ...ports.Message) error

func (f senderFunc) Send(_ context.Context, msgs ...ports.Message) error { return f(msgs...) }
