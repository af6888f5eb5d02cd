package ports_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/ports"
)

func TestTopicValidate(t *testing.T) {
	for _, ok := range []ports.Topic{"orders", "a.b-c_d", "x"} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []ports.Topic{"", "has space", "a/b", "#", ports.Topic(strings.Repeat("a", 201))} {
		if err := bad.Validate(); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	base := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	bad := map[string]func(*ports.SubscriptionSpec){
		"no group":          func(s *ports.SubscriptionSpec) { s.Group = "" },
		"unknown mode":      func(s *ports.SubscriptionSpec) { s.Mode = 9 },
		"negative inflight": func(s *ports.SubscriptionSpec) { s.InFlight = -1 },
		"negative batch":    func(s *ports.SubscriptionSpec) { s.Batch.Size = -1 },
		"bad key filter":    func(s *ports.SubscriptionSpec) { s.KeyFilter = "[" },
		"jitter above 1":    func(s *ports.SubscriptionSpec) { s.Retry.Jitter = 2 },
		"negative ttl":      func(s *ports.SubscriptionSpec) { s.InstanceTTL = -time.Second },
	}
	for name, mutate := range bad {
		s := base
		mutate(&s)
		if err := s.Validate(); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := (ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast}).Validate(); err != nil {
		t.Errorf("broadcast without group: %v", err)
	}
}

func TestRedeliveryCountFrom(t *testing.T) {
	if n, err := ports.RedeliveryCountFrom(ports.Headers{}); n != 0 || err != nil {
		t.Fatalf("missing header: %d, %v", n, err)
	}
	if n, err := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, "3")); n != 3 || err != nil {
		t.Fatalf("3: %d, %v", n, err)
	}
	for _, bad := range []string{"-1", "x", "1e3"} {
		_, err := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, bad))
		if !ports.IsPoison(err) {
			t.Errorf("%q: %v, want a poison HeaderError", bad, err)
		}
	}
}

// TestStampFillsOnlyWhatSettlementNeeds: Stamp writes the id and the
// partition key, on a copy of the caller's headers, and nothing else: the
// CloudEvents attributes are the sender's to ask for.
func TestStampFillsOnlyWhatSettlementNeeds(t *testing.T) {
	h := ports.NewHeaders("x", "1")
	m := ports.Message{Topic: "t", Key: "k", Headers: h}
	m.Stamp()
	if len(h) != 1 {
		t.Fatalf("Stamp modified the caller's headers: %v", h)
	}
	id := m.Headers.Get(ports.HeaderID)
	if !strings.Contains(id, "-") || len(id) < 26 {
		t.Errorf("id %q is not a NewID", id)
	}
	want := ports.NewHeaders("x", "1", ports.HeaderID, id, ports.HeaderPartitionKey, "k")
	if !slices.Equal(m.Headers, want) {
		t.Fatalf("Stamp wrote %v, want %v", m.Headers, want)
	}
	unkeyed := ports.Message{Topic: "t"}
	unkeyed.Stamp()
	if len(unkeyed.Headers) != 1 || unkeyed.Headers.Get(ports.HeaderID) == "" {
		t.Fatalf("Stamp of an unkeyed message wrote %v, want the id alone", unkeyed.Headers)
	}
	if a, b := ports.NewID(), ports.NewID(); a == b {
		t.Fatalf("NewID repeated %q", a)
	}
}

// TestStampKeepsACompleteEnvelopeAndStampInPlaceFills: Stamp leaves a
// message with every envelope header as it is (its headers, no
// allocation); StampInPlace fills the message's own headers, keeping a
// given id.
func TestStampKeepsACompleteEnvelopeAndStampInPlaceFills(t *testing.T) {
	h := ports.NewHeaders("x", "1")
	m := ports.Message{Topic: "t", Key: "k", Headers: h}
	m.StampInPlace()
	if len(m.Headers) != 3 || m.Headers.Get("x") != "1" || m.Headers.Get(ports.HeaderPartitionKey) != "k" || m.Headers.Get(ports.HeaderID) == "" {
		t.Fatalf("StampInPlace did not fill the message's own headers: %v", m.Headers)
	}
	id := m.Headers.Get(ports.HeaderID)
	if allocs := testing.AllocsPerRun(100, func() { m.Stamp() }); allocs != 0 {
		t.Fatalf("Stamp of a stamped message allocated %v times", allocs)
	}
	m.Stamp()
	if m.Headers.Get(ports.HeaderID) != id || len(m.Headers) != 3 {
		t.Fatalf("Stamp changed a stamped message: %v", m.Headers)
	}
	given := ports.Message{Topic: "t", Headers: ports.NewHeaders(ports.HeaderID, "given-id")}
	given.StampInPlace()
	if given.Headers.Get(ports.HeaderID) != "given-id" || len(given.Headers) != 1 {
		t.Fatalf("StampInPlace of a message with an id: %v, want it unchanged", given.Headers)
	}
}

func FuzzRedeliveryCountFrom(f *testing.F) {
	for _, s := range []string{"0", "12", "-1", "", "abc", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, s))
		if err != nil && !ports.IsPoison(err) {
			t.Fatalf("%q: error %v is not poison", s, err)
		}
		if n < 0 {
			t.Fatalf("%q: negative count %d", s, n)
		}
	})
}

func TestReasonTextIsBoundedValidUTF8(t *testing.T) {
	long := strings.Repeat("é", 700) // 1400 bytes, 2 per rune
	for _, reason := range []string{long, "bad \xff byte", strings.Repeat("a", 1023) + "é"} {
		got := ports.Disposition{Action: ports.DeadLetter, Reason: errors.New(reason)}.ReasonText()
		if len(got) > 1024 || !utf8.ValidString(got) {
			t.Errorf("ReasonText of a %d-byte reason: %d bytes, valid UTF-8 %v", len(reason), len(got), utf8.ValidString(got))
		}
	}
	if got := (ports.Disposition{Action: ports.Ack}).ReasonText(); got != "" {
		t.Errorf("no reason gave %q", got)
	}
}

func FuzzReasonText(f *testing.F) {
	f.Add("plain")
	f.Add(strings.Repeat("世", 400))
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		got := ports.Disposition{Reason: errors.New(s)}.ReasonText()
		if len(got) > 1024 || !utf8.ValidString(got) {
			t.Fatalf("%q → %q: %d bytes, valid %v", s, got, len(got), utf8.ValidString(got))
		}
	})
}

func TestTopicValidateNamesTheRuneNotAByte(t *testing.T) {
	err := ports.Topic("ünïcode").Validate()
	if err == nil || !strings.Contains(err.Error(), "'ü'") {
		t.Fatalf("Validate = %v, want the invalid character 'ü' named", err)
	}
}

type defaulter struct{ ports.Adapter }

func (defaulter) SpecDefaults(s ports.SubscriptionSpec) ports.SubscriptionSpec {
	if s.Retry.MaxAttempts == 0 {
		s.Retry.MaxAttempts = 2
	}
	return s
}

type wrapper struct{ ports.Adapter }

func (w wrapper) Unwrap() ports.Adapter { return w.Adapter }

func TestApplySpecDefaultsFollowsWrappers(t *testing.T) {
	got := ports.ApplySpecDefaults(wrapper{defaulter{}}, ports.SubscriptionSpec{Topic: "t"})
	if got.Retry.MaxAttempts != 2 {
		t.Fatalf("MaxAttempts = %d, want the adapter default 2", got.Retry.MaxAttempts)
	}
	if got := ports.ApplySpecDefaults(nil, ports.SubscriptionSpec{}); got.Retry.MaxAttempts != 0 {
		t.Fatalf("nil adapter changed the spec: %+v", got)
	}
}

func TestSendErrorsFindsEveryFailedMessage(t *testing.T) {
	joined := errors.Join(
		&ports.SendError{Index: 0, Topic: "a", Err: ports.ErrUnconfirmed},
		fmt.Errorf("wrapped: %w", &ports.SendError{Index: 2, Topic: "a", Err: ports.ErrInvalid}),
		errors.Join(&ports.SendError{Index: 5, Topic: "b", Err: ports.ErrClosed}),
	)
	got := ports.SendErrors(fmt.Errorf("send: %w", joined))
	if len(got) != 3 || got[0].Index != 0 || got[1].Index != 2 || got[2].Index != 5 {
		t.Fatalf("SendErrors = %v, want indexes 0, 2, 5", got)
	}
	if ports.SendErrors(nil) != nil || ports.SendErrors(errors.New("x")) != nil {
		t.Fatal("SendErrors of an error without SendError must be nil")
	}
}

func TestDeclareGroupUnsupported(t *testing.T) {
	err := ports.DeclareGroup(context.Background(), wrapper{named{}}, "t", "g")
	if !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("DeclareGroup on an adapter without it = %v, want ErrUnsupported", err)
	}
}

type named struct{ ports.Adapter }

func (named) Name() string { return "named" }
