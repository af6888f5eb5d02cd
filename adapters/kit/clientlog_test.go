package kit_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// Lines go to the logger of the adapter opened last that is still open;
// the client is handed the ClientLog once.
func TestClientLogFollowsTheLastOpenAdapter(t *testing.T) {
	var first, second bytes.Buffer
	a, b := slog.New(slog.NewTextHandler(&first, nil)), slog.New(slog.NewTextHandler(&second, nil))
	c := &kit.ClientLog{Name: "redis"}
	installs := 0
	install := func() { installs++ }
	c.Use(a, install)
	c.Printf(context.Background(), "redis: failed to dial after %d attempts", 5)
	c.Use(b, install)
	c.Done(a) // not the current one: b keeps the lines
	c.Printf(context.Background(), "second line")
	if installs != 1 {
		t.Fatalf("install called %d times, want once", installs)
	}
	if got := first.String(); !strings.Contains(got, `level=WARN msg="redis client: failed to dial after 5 attempts" adapter=redis`) || strings.Contains(got, "second line") {
		t.Fatalf("first adapter's log:\n%s", got)
	}
	if got := second.String(); !strings.Contains(got, `msg="redis client: second line"`) {
		t.Fatalf("second adapter's log:\n%s", got)
	}
	var def bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	c.Done(b)
	second.Reset()
	c.Printf(context.Background(), "to the default logger")
	if second.Len() != 0 || !strings.Contains(def.String(), "to the default logger") {
		t.Fatalf("with every adapter closed: closed adapter's logger got %q, slog.Default() got %q", second.String(), def.String())
	}
}
