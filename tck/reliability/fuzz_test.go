package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// Fuzz targets for the decoders of untrusted bytes a consumer meets. Each
// drives a real pipeline over the in-process broker, set up once per fuzz
// worker: whatever the input, the message must end acked or dead-lettered
// with a reason, within a bound — never a panic, a hang or a silent drop.

// fuzzRig is a pipeline and a dead-letter consumer shared by the inputs
// of one fuzz worker.
type fuzzRig struct {
	a     *mem.Adapter
	topic ports.Topic
	l     *tck.Ledger
	ok    chan *ports.Delivery // handled and acked
	dead  chan *ports.Delivery // copies on the dead-letter topic
}

// newFuzzRig starts a consumer of topic whose stages are built by build
// (which must forward every handled delivery to rig.ok), and a consumer
// of its dead-letter topic.
func newFuzzRig(f *testing.F, topic ports.Topic, build func(rig *fuzzRig, src flow.Stream[*ports.Delivery])) *fuzzRig {
	b, err := mem.NewBroker()
	if err != nil {
		f.Fatal(err)
	}
	a, err := mem.New(b)
	if err != nil {
		f.Fatal(err)
	}
	rig := &fuzzRig{a: a, topic: topic, l: tck.NewLedger("mem", "fuzz-"+string(topic)),
		ok: make(chan *ports.Delivery, 1), dead: make(chan *ports.Delivery, 1)}
	spec := ports.SubscriptionSpec{Topic: topic, Group: "fuzz", InFlight: 4, Retry: ports.RetryPolicy{MaxAttempts: 2, NoBackoff: true}}
	p := flow.New(a, spec, rig.l.Observer(), flow.WithErrorHandler(func(error) {}))
	build(rig, p.Source())
	dspec := spec
	dspec.Topic = ports.DeadLetterTopic(topic)
	dp := flow.New(a, dspec, rig.l.DeadLetterObserver(), flow.WithErrorHandler(func(error) {}))
	flow.Sink(dp.Source(), func(_ context.Context, d *ports.Delivery) error {
		rig.dead <- d
		return nil
	})
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		f.Fatal(err)
	}
	if err := dp.Start(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = p.Stop(ctx)
		_ = dp.Stop(ctx)
		_ = b.Close(ctx)
		if r := rig.l.Report(); r.Lost > 0 {
			f.Errorf("fuzz rig ledger: %s", r.Line())
		}
	})
	return rig
}

// outcome sends m and waits for its delivery to be handled or
// dead-lettered; it fails t after a bound (a hang or a silent drop).
func (rig *fuzzRig) outcome(t *testing.T, m ports.Message) (handled, dead *ports.Delivery) {
	t.Helper()
	m.Topic = rig.topic
	if m.Headers == nil {
		m.Headers = ports.Headers{}
	}
	id := rig.l.NewID()
	m.Headers.Set(ports.HeaderID, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rig.l.Send(ctx, rig.a, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	for {
		select {
		case d := <-rig.ok:
			if d.ID == id {
				return d, nil
			}
		case d := <-rig.dead:
			if d.ID == id {
				return nil, d
			}
		case <-ctx.Done():
			t.Fatalf("message %s neither handled nor dead-lettered within 10s: a hang or a silent drop", id)
		}
	}
}

type order struct {
	ID    string   `json:"id"`
	Total int64    `json:"total"`
	Lines []string `json:"lines"`
}

// FuzzDecodePayload: flow.Decode over arbitrary payload bytes. A payload
// that json.Unmarshal accepts is handled with the same value; any other is
// dead-lettered as poison on its first attempt with the decode error as
// the reason.
func FuzzDecodePayload(f *testing.F) {
	for _, s := range []string{
		`{"id":"o-1","total":42,"lines":["a","b"]}`, `{}`, `null`, ``, `{"id":`, `[1,2]`,
		`{"total":1e400}`, `{"total":"12"}`, "\xff\xfe", `{"id":"\ud800"}`, `{"lines":[` + strings.Repeat(`"x",`, 100) + `"y"]}`,
	} {
		f.Add([]byte(s))
	}
	rig := newFuzzRig(f, "fuzz.decode", func(rig *fuzzRig, src flow.Stream[*ports.Delivery]) {
		flow.Sink(flow.Decode[order](src), func(ctx context.Context, _ order) error {
			rig.ok <- flow.DeliveryFrom(ctx)
			return nil
		})
	})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var want order
		wantErr := json.Unmarshal(payload, &want)
		handled, dead := rig.outcome(t, ports.Message{Payload: payload})
		switch {
		case wantErr == nil && handled == nil:
			t.Fatalf("valid payload %q dead-lettered: %s", payload, dead.Headers.Get(ports.HeaderDeadLetterReason))
		case wantErr != nil && dead == nil:
			t.Fatalf("invalid payload %q (%v) was handled", payload, wantErr)
		case dead != nil:
			reason := dead.Headers.Get(ports.HeaderDeadLetterReason)
			if !strings.Contains(reason, "decode") || dead.Headers.Get(ports.HeaderAttempts) != "1" {
				t.Fatalf("dead letter of %q: reason %q, attempts %q; want the decode error on the first attempt", payload, reason, dead.Headers.Get(ports.HeaderAttempts))
			}
		}
	})
}

// FuzzDeadLetterReason: any handler error text becomes a bounded
// dead-letter reason header, with the source topic and the attempts, on
// the dead-letter copy.
func FuzzDeadLetterReason(f *testing.F) {
	for _, s := range []string{"", "order total is negative", strings.Repeat("x", 2000), "multi\nline\x00nul", strings.Repeat("é", 600), "x" + strings.Repeat("é", 600)} {
		f.Add(s)
	}
	rig := newFuzzRig(f, "fuzz.reason", func(rig *fuzzRig, src flow.Stream[*ports.Delivery]) {
		flow.Sink(src, func(_ context.Context, d *ports.Delivery) error {
			return ports.Poison(errors.New(string(d.Payload)))
		})
	})
	f.Fuzz(func(t *testing.T, reason string) {
		want := ports.Disposition{Reason: ports.Poison(errors.New(reason))}.ReasonText()
		valid := strings.ToValidUTF8(ports.Poison(errors.New(reason)).Error(), "\uFFFD")
		if len(want) > 1024 || !utf8.ValidString(want) || !strings.HasPrefix(valid, want) {
			t.Fatalf("ReasonText of %q is %q: want valid UTF-8, a prefix of the error (invalid bytes replaced) of at most 1024 bytes", reason, want)
		}
		_, dead := rig.outcome(t, ports.Message{Payload: []byte(reason)})
		if dead == nil {
			t.Fatal("a poison message was handled")
		}
		h := dead.Headers
		if h.Get(ports.HeaderDeadLetterReason) != want || h.Get(ports.HeaderDeadLetterTopic) != string(rig.topic) {
			t.Fatalf("dead-letter headers %q, want reason %q from %s", h, want, rig.topic)
		}
		if n, err := strconv.Atoi(h.Get(ports.HeaderAttempts)); err != nil || n != 1 {
			t.Fatalf("attempts header %q", h.Get(ports.HeaderAttempts))
		}
	})
}

// TestReasonTextKeepsValidUTF8 documents a bug: ports.Disposition.ReasonText
// cuts a reason longer than 1 KiB at byte 1024, in the middle of a
// multi-byte character, so a valid UTF-8 reason becomes an invalid header
// value (MQTT 5 user properties and several brokers' string headers must be
// valid UTF-8).
func TestReasonTextKeepsValidUTF8(t *testing.T) {
	reason := "x" + strings.Repeat("é", 600) // 1201 bytes, valid UTF-8; byte 1024 is inside an "é"
	got := ports.Disposition{Reason: errors.New(reason)}.ReasonText()
	if !utf8.ValidString(got) {
		t.Fatalf("ReasonText: a %d-byte valid UTF-8 reason became %d bytes of invalid UTF-8 ending %q", len(reason), len(got), got[len(got)-3:])
	}
}

// FuzzEnvelopeRoundTrip: arbitrary keys, header names and values and
// payloads travel through the in-process broker intact; the id header, when
// given, is the delivery's id.
func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add("k", "x-custom", "v", []byte("{}"))
	f.Add("", ports.HeaderRedeliveryCount, "-1", []byte("x"))
	f.Add("device-*", ports.HeaderPartitionKey, "other", []byte(nil))
	f.Add("\xff", "", "\x00", []byte("\xff"))
	f.Add("k", ports.HeaderTraceParent, "00-zz", []byte("{}"))
	rig := newFuzzRig(f, "fuzz.envelope", func(rig *fuzzRig, src flow.Stream[*ports.Delivery]) {
		flow.Sink(src, func(_ context.Context, d *ports.Delivery) error {
			rig.ok <- d
			return nil
		})
	})
	f.Fuzz(func(t *testing.T, key, name, value string, payload []byte) {
		if name == ports.HeaderID {
			name = "x-" + name // the rig owns the id
		}
		d, dead := rig.outcome(t, ports.Message{Key: key, Payload: payload, Headers: ports.NewHeaders(name, value)})
		if d == nil {
			t.Fatalf("dead-lettered: %q", dead.Headers.Get(ports.HeaderDeadLetterReason))
		}
		if d.Key != key || string(d.Payload) != string(payload) {
			t.Fatalf("delivered key %q payload %q, sent %q %q", d.Key, d.Payload, key, payload)
		}
		if got := d.Headers.Get(name); got != value && !(value == "" && stamped(name)) {
			t.Fatalf("header %q: delivered %q, sent %q", name, got, value)
		}
	})
}

// stamped reports whether Send fills header name when it is empty.
func stamped(name string) bool {
	switch name {
	case ports.HeaderPartitionKey:
		return true
	}
	return false
}
