package operators_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Messages from a producer without sluice's envelope, on a broker that
// assigns no identity (mem's SendForeign, like MQTT without the ce-id
// user property or AMQP without message-id), have no ID: Dedupe must
// handle every one of them — even two with the same body — and log that
// once, while it still deduplicates the messages that have an identity.
func TestDedupeNeverDropsMessagesWithoutIdentity(t *testing.T) {
	b := memBroker(t)
	a := memAdapter(t, b)
	var log syncBuffer
	var mu sync.Mutex
	var handled []*ports.Delivery
	done := make(chan struct{})
	const want = 4 // three foreign messages and one of the two copies of the sluice message
	p := flow.New(a, ports.SubscriptionSpec{Topic: "readings", Group: "g"})
	flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	}), func(_ context.Context, d *ports.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, d)
		if len(handled) == want {
			close(done)
		}
		return nil
	})
	startPipeline(t, p)
	ctx := context.Background()
	for _, body := range []string{`{"t":21.5}`, `{"t":21.5}`, `{"t":22}`} {
		if err := a.SendForeign(ctx, "readings", []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	m := ports.Message{Topic: "readings", Payload: []byte(`{"t":23}`), Headers: ports.NewHeaders(ports.HeaderID, "reading-1")}
	if err := a.Send(ctx, m, m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		t.Fatalf("handled %d messages in 10s, want %d: a message without identity was dropped", len(handled), want)
	}
	// Every delivery is settled: the four handled and the duplicate.
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Acked < want+1 {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d deliveries in 10s, want %d (stats %+v)", p.Stats().Acked, want+1, p.Stats())
		}
		time.Sleep(time.Millisecond) // polling a counter, bounded by the deadline
	}
	mu.Lock()
	defer mu.Unlock()
	none := 0
	for _, d := range handled {
		if !d.HasIdentity() {
			none++
			if d.IDSource != ports.IDNone {
				t.Errorf("delivery without ID has IDSource %s", d.IDSource)
			}
		}
	}
	if none != 3 || len(handled) != want {
		t.Fatalf("handled %d messages, %d without identity; want 4 and 3", len(handled), none)
	}
	if n := strings.Count(log.String(), "without a key"); n != 1 {
		t.Fatalf("logged the pass-through %d times, want once:\n%s", n, log.String())
	}
}
