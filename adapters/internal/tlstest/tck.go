package tlstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// urlHarness makes every adapter of a TCK subtest with adapters.Open on
// one URL, under a namespace of its own.
type urlHarness struct {
	url  string
	opts []adapters.Option
}

func (h *urlHarness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return adapters.Open(ctx, h.url, append(h.opts, adapters.NotExclusive())...)
}

func (h *urlHarness) Close() {}

// RunSecureTCK runs tck.SecureTransportCases (round trip, LOAD_BALANCE,
// dead letter) with adapters opened by adapters.Open(rawURL, opts...):
// the whole path over the TLS connection and authentication the URL
// names. Each subtest gets a namespace of its own ("tls" and 8 hex
// digits), so opts must not set one.
func RunSecureTCK(t *testing.T, rawURL string, opts ...adapters.Option) {
	t.Helper()
	tck.RunCases(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o := append(append([]adapters.Option(nil), opts...), adapters.WithNamespace("tls"+hex.EncodeToString(b)))
		return &urlHarness{url: rawURL, opts: o}, nil
	}, tck.Options{}, tck.SecureTransportCases...)
}
