package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// A Mux is a value: its schemes and its one active adapter are its own,
// apart from DefaultMux's.
func TestMuxIsAValue(t *testing.T) {
	ctx := context.Background()
	open := adapters.OpenerFunc(func(context.Context, *url.URL, *adapters.Config) (ports.Adapter, error) {
		return fakeAdapter{}, nil
	})
	m1, m2 := adapters.NewMux(), adapters.NewMux()
	m1.Register("one", open)
	m2.Register("two", open)
	if got := fmt.Sprint(m1.Schemes(), m2.Schemes()); got != "[one] [two]" {
		t.Fatalf("schemes = %s, want each Mux to hold only its own", got)
	}
	if _, ok := adapters.DefaultMux.Opener("one"); ok {
		t.Fatal("a scheme registered on a new Mux leaked into DefaultMux")
	}
	if _, err := m2.Open(ctx, "one://h/"); !errors.Is(err, adapters.ErrUnknownScheme) {
		t.Fatalf("m2.Open(one://) = %v, want ErrUnknownScheme", err)
	}

	a1, err := m1.Open(ctx, "one://h/")
	if err != nil {
		t.Fatalf("m1.Open: %v", err)
	}
	if _, err := m1.Open(ctx, "one://h/"); !errors.Is(err, adapters.ErrAlreadyOpen) {
		t.Fatalf("second m1.Open = %v, want ErrAlreadyOpen", err)
	}
	a2, err := m2.Open(ctx, "two://h/") // another Mux has its own active slot
	if err != nil {
		t.Fatalf("m2.Open beside m1's adapter: %v", err)
	}
	closeAdapter(t, a2)
	closeAdapter(t, a1)
	a1, err = m1.Open(ctx, "one://h/")
	if err != nil {
		t.Fatalf("m1.Open after Close: %v", err)
	}
	closeAdapter(t, a1)

	// The openers adapter packages registered on DefaultMux can be put on
	// a Mux of one's own.
	o, ok := adapters.DefaultMux.Opener("FAKEQ")
	if !ok {
		t.Fatal(`DefaultMux.Opener("FAKEQ") not found: the lookup must be case-insensitive`)
	}
	m3 := adapters.NewMux()
	m3.Register("fakeq", o)
	a3, err := m3.Open(ctx, "fakeq://h/")
	if err != nil {
		t.Fatalf("m3.Open with DefaultMux's opener: %v", err)
	}
	closeAdapter(t, a3)
}

// A URL whose user name is its password (guest:guest@) is shown masked
// the same way everywhere in one error: the URL of the URLError and the
// opener's own text.
func TestMaskingIsConsistent(t *testing.T) {
	m := adapters.NewMux()
	m.Register("echo", adapters.OpenerFunc(func(_ context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		return nil, fmt.Errorf("%w: dial echo://%s:%s@%s failed", ports.ErrRefused, cfg.Username, cfg.Password, u.Host)
	}))
	_, err := m.Open(context.Background(), "echo://guest:guest@h:1/")
	if err == nil {
		t.Fatal("Open succeeded, want the opener's error")
	}
	text := err.Error()
	if strings.Contains(text, "guest") {
		t.Fatalf("error shows the password: %s", text)
	}
	if n := strings.Count(text, "xxxxx:xxxxx@h"); n != 2 {
		t.Fatalf("error masks the URL %d time(s) as xxxxx:xxxxx@h, want both places the same: %s", n, text)
	}
	if got := adapters.Redact(&url.URL{Scheme: "amqp", User: url.UserPassword("svc", "guest"), Host: "h"}); got != "amqp://svc:xxxxx@h" {
		t.Fatalf("Redact masked a user name that does not hold the password: %s", got)
	}
}

// An adapter built on the portable layer logs its capabilities at New;
// through Open the caller reads them once, in Open's line with the URL.
func TestOpenLogsTheCapabilitiesOnce(t *testing.T) {
	m := adapters.NewMux()
	caps := ports.Capabilities{PublisherConfirm: true, PerMessageAck: true, DurableGroups: true, ExactRedeliveryCount: true}
	m.Register("ready", adapters.OpenerFunc(func(_ context.Context, _ *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		portable.LogCapabilities(cfg.Logger, portable.ReadyMessage, "fake", caps) // what portable.New does
		cfg.Logger.Info("the adapter's own line")
		return fakeAdapter{caps: caps}, nil
	}))
	var logs logBuffer
	a, err := m.Open(context.Background(), "ready://h/", adapters.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAdapter(t, a)
	var msgs []string
	for _, r := range logs.Records(t) {
		msgs = append(msgs, fmt.Sprint(r["msg"]))
	}
	// caps lack Broadcast: one warning, from Open's line, not two
	if got := strings.Join(msgs, " | "); got != "the adapter's own line | sluice: adapter opened | sluice: adapter lacks a guarantee" {
		t.Fatalf("records = %s, want the adapter's own line and the start-up records once", got)
	}
}
