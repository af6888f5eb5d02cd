package kit_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// TestSendPrepared: a message prepare refuses is not sent and keeps its
// error; the errors of the sent records land on their messages; all
// confirmed is nil.
func TestSendPrepared(t *testing.T) {
	refused, lost := errors.New("refused"), errors.New("lost")
	msgs := []ports.Message{{Key: "a"}, {Key: "bad"}, {Key: "c"}, {Key: "lost"}}
	prepare := func(m *ports.Message) (string, error) {
		if m.Key == "bad" {
			return "", refused
		}
		return m.Key, nil
	}
	var sent []string
	errs := kit.SendPrepared(msgs, prepare, func(recs []string) []error {
		sent = append(sent, recs...)
		out := make([]error, len(recs))
		out[len(recs)-1] = lost
		return out
	})
	if !slices.Equal(sent, []string{"a", "c", "lost"}) {
		t.Fatalf("sent %v, want a c lost", sent)
	}
	if len(errs) != 4 || errs[0] != nil || errs[1] != refused || errs[2] != nil || errs[3] != lost {
		t.Fatalf("errors %v, want [nil refused nil lost]", errs)
	}
	if errs := kit.SendPrepared(msgs[:1], prepare, func([]string) []error { return nil }); errs != nil {
		t.Fatalf("all confirmed: %v, want nil", errs)
	}
	if errs := kit.SendPrepared(msgs[1:2], prepare, func([]string) []error { t.Fatal("sent nothing to send"); return nil }); errs[0] != refused {
		t.Fatalf("only a refused message: %v", errs)
	}
}
