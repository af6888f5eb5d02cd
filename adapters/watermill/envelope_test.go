package wmbridge_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// TestEnvelopeRoundTrip: Messages and Message carry the UUID as the
// envelope id and the metadata as the headers, both ways; an envelope
// without an id gets a UUID of its own.
func TestEnvelopeRoundTrip(t *testing.T) {
	in := message.NewMessage("id-1", []byte("p"))
	in.Metadata.Set(ports.HeaderID, "stale")
	in.Metadata.Set(ports.HeaderPartitionKey, "k")
	in.Metadata.Set("x-user", "alice")
	m := wmbridge.Messages("orders", in)[0]
	if m.Topic != "orders" || m.Key != "k" || m.Headers.Get(ports.HeaderID) != "id-1" || m.Headers.Get("x-user") != "alice" || string(m.Payload) != "p" {
		t.Fatalf("Messages: %+v", m)
	}
	out := wmbridge.Message(m.Headers.Get(ports.HeaderID), m.Payload, m.Headers)
	if out.UUID != "id-1" || out.Metadata.Get("x-user") != "alice" || out.Metadata.Get(ports.HeaderPartitionKey) != "k" || string(out.Payload) != "p" {
		t.Fatalf("Message: %s %v %s", out.UUID, out.Metadata, out.Payload)
	}
	if a, b := wmbridge.Message("", nil, nil), wmbridge.Message("", nil, nil); a.UUID == "" || a.UUID == b.UUID {
		t.Fatalf("Message without an id: UUIDs %q and %q; want two new ones", a.UUID, b.UUID)
	}
}
