package flow_test

import (
	"context"
	"encoding/json"
	"reflect"
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
	if h.Get(ports.HeaderID) == "" || h.Get(ports.HeaderTime) == "" || h.Get(ports.HeaderSpecVersion) != "1.0" || h.Get(ports.HeaderPartitionKey) != "d-1" ||
		h.Get(ports.HeaderContentType) != "application/json" || !strings.HasSuffix(h.Get(ports.HeaderType), "reading") {
		t.Fatalf("headers %v: want id, time, spec version, partition key, content type and type", h)
	}
	id, at := h.Get(ports.HeaderID), h.Get(ports.HeaderTime)
	m.Payload = append(m.Payload, "trailing bytes the stamp's room would hold"...)
	if h.Get(ports.HeaderID) != id || h.Get(ports.HeaderTime) != at {
		t.Fatalf("appending to the payload changed the stamp: %q %q, was %q %q", h.Get(ports.HeaderID), h.Get(ports.HeaderTime), id, at)
	}
	sent := m
	sent.Stamp(time.Now()) // what Send does
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
	if allocs > 4 {
		t.Fatalf("%v allocations per message, want 4: the value boxed for encoding/json, the payload with the id and time, the header map (two)", allocs)
	}
}
