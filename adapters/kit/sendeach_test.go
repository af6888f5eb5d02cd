package kit_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestSendEach(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("refused")
	var calls atomic.Int32
	send := func(_ context.Context, m *ports.Message) error {
		calls.Add(1)
		if string(m.Payload) == "bad" {
			return refused
		}
		return nil
	}
	msgs := make([]ports.Message, 5)
	for i := range msgs {
		msgs[i].Payload = []byte(strconv.Itoa(i))
	}
	if errs := kit.SendEach(ctx, msgs, send); errs != nil || calls.Load() != 5 {
		t.Fatalf("all confirmed: got %v after %d calls, want nil after 5", errs, calls.Load())
	}
	msgs[3].Payload = []byte("bad")
	errs := kit.SendEach(ctx, msgs, send)
	if len(errs) != 5 || !errors.Is(errs[3], refused) || errs[0] != nil || errs[4] != nil {
		t.Fatalf("one refused: got %v, want the error at index 3 only", errs)
	}
	if errs := kit.SendEach(ctx, msgs[3:4], send); len(errs) != 1 || !errors.Is(errs[0], refused) {
		t.Fatalf("a single refused message: got %v", errs)
	}
	if errs := kit.SendEach(ctx, nil, send); errs != nil {
		t.Fatalf("no messages: got %v, want nil", errs)
	}
}
