package flow_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

type reading struct {
	Device string  `json:"device"`
	Value  float64 `json:"value"`
	Note   string  `json:"note"`
}

// NewMessage encodes as json.Marshal does and stamps the message, so
// that Send has nothing to add and need not copy the headers; the
// payload is the caller's to append to without touching the stamp.
func TestNewMessageEncodesAndStamps(t *testing.T) {
	v := reading{Device: "d-1", Value: 2.5, Note: "<b>&</b>"}
	m, err := flow.NewMessage(context.Background(), "out", v, flow.Key("d-1"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(v)
	if string(m.Payload) != string(want) {
		t.Fatalf("payload %s, want json.Marshal's %s", m.Payload, want)
	}
	h := m.Headers
	id := h.Get(ports.HeaderID)
	wantHeaders := ports.NewHeaders(ports.HeaderContentType, "application/json", ports.HeaderID, id, ports.HeaderPartitionKey, "d-1")
	if id == "" || !slices.Equal(h, wantHeaders) {
		t.Fatalf("headers %v: want the content type, an id and the partition key, nothing else", h)
	}
	m.Payload = append(m.Payload, "trailing bytes the id's room would hold"...)
	if h.Get(ports.HeaderID) != id {
		t.Fatalf("appending to the payload changed the id: %q, was %q", h.Get(ports.HeaderID), id)
	}
	sent := m
	sent.Stamp() // what Send does
	if reflect.ValueOf(sent.Headers).UnsafePointer() != reflect.ValueOf(m.Headers).UnsafePointer() {
		t.Fatal("Send's Stamp copied the headers of a message NewMessage made")
	}
	mine, err := flow.NewMessage(context.Background(), "out", v, flow.Header(ports.HeaderID, "mine"))
	if err != nil || mine.Headers.Get(ports.HeaderID) != "mine" {
		t.Fatalf("id %q, %v: want the option's", mine.Headers.Get(ports.HeaderID), err)
	}
	if _, err := flow.NewMessage(context.Background(), "out", func() {}); err == nil || !strings.Contains(err.Error(), "unsupported type") {
		t.Fatalf("encoding a func: %v, want json's unsupported type error", err)
	}
	if raceEnabled {
		// The encoder's pool drops buffers at random under -race:
		// scripts/test.sh runs this test again without it.
		return
	}
	allocs := testing.AllocsPerRun(200, func() { _, _ = flow.NewMessage(context.Background(), "out", v) })
	if allocs > 3 {
		t.Fatalf("%v allocations per message, want 3: the value boxed for encoding/json, the payload with the id, the headers", allocs)
	}
}

// CloudEvents adds the attributes CloudEvents requires (spec version,
// source, time, and the Go type name unless Type sets one), keeps what the
// caller set, and a CloudEvent without a source is refused.
func TestNewMessageCloudEvents(t *testing.T) {
	ctx := context.Background()
	before := time.Now().UTC()
	m, err := flow.NewMessage(ctx, "out", reading{Device: "d-1"}, flow.CloudEvents("/sensors"))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Headers
	at, err := time.Parse(time.RFC3339Nano, h.Get(ports.HeaderTime))
	if err != nil || at.Before(before.Truncate(time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("ce-time %q (%v): want the time of NewMessage", h.Get(ports.HeaderTime), err)
	}
	if h.Get(ports.HeaderSpecVersion) != "1.0" || h.Get(ports.HeaderSource) != "/sensors" || h.Get(ports.HeaderType) != "flow_test.reading" || h.Get(ports.HeaderID) == "" {
		t.Fatalf("headers %v: want spec version 1.0, the source, the Go type name and an id", h)
	}
	typed, err := flow.NewMessage(ctx, "out", reading{}, flow.CloudEvents("/sensors"), flow.Type("com.example.reading.v1"),
		flow.Header(ports.HeaderTime, "2026-01-02T03:04:05Z"))
	if err != nil || typed.Headers.Get(ports.HeaderType) != "com.example.reading.v1" || typed.Headers.Get(ports.HeaderTime) != "2026-01-02T03:04:05Z" {
		t.Fatalf("headers %v (%v): want the type and time the options set", typed.Headers, err)
	}
	if _, err := flow.NewMessage(ctx, "out", reading{}, flow.CloudEvents("")); err == nil || !strings.Contains(err.Error(), "source") {
		t.Fatalf("a CloudEvent without a source: %v, want an error naming the source", err)
	}
	plain, err := flow.NewMessage(ctx, "out", reading{}, flow.Type("com.example.reading.v1"))
	if err != nil || plain.Headers.Get(ports.HeaderSpecVersion) != "" || plain.Headers.Get(ports.HeaderTime) != "" {
		t.Fatalf("headers %v (%v): Type alone makes no CloudEvent", plain.Headers, err)
	}
}
