package rocketmq_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// The access key and secret the signing peer accepts, and the connect
// timeout the refusals are held to.
const (
	accessKey, accessSecret = "sluice-ak", "sluice-Secret-0f-the-ak"
	connectTimeout          = 3 * time.Second
)

// signingPeer starts rocketmqtest checking every call's signature.
func signingPeer(t *testing.T, opts ...rocketmqtest.Option) *rocketmqtest.Broker {
	t.Helper()
	b, err := rocketmqtest.Start(append([]rocketmqtest.Option{rocketmqtest.WithCredentials(accessKey, accessSecret)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// urlHarness opens each TCK adapter with adapters.Open on one URL (the
// whole opener path: the secret from a file, the signed check call), with
// the peer's fault hooks.
type urlHarness struct {
	peerHarness
	url string
}

func (h *urlHarness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return adapters.Open(ctx, h.url, adapters.NotExclusive())
}

// TestSignedCredentialsTCK runs the secure-transport cases of the TCK over
// the client's TLS with the access secret read from a file, against a peer
// that verifies every request's signature.
func TestSignedCredentialsTCK(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "rocketmq-secret")
	if err := os.WriteFile(secretFile, []byte(accessSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tck.RunCases(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		b := signingPeer(t)
		raw := "rocketmq://" + accessKey + "@" + b.Endpoint() + "?password_file=" + url.QueryEscape(secretFile) +
			"&insecure=true&invisible=2s&await=1s"
		t.Cleanup(func() {
			if n := b.AuthFailures(); n != 0 {
				t.Errorf("the peer refused %d calls of a correctly signing client", n)
			}
		})
		return &urlHarness{peerHarness: peerHarness{harness: &harness{ep: b.Endpoint(), invisible: peerInvisible}, b: b}, url: raw}, nil
	}, tck.Options{}, tck.SecureTransportCases...)
}

// TestSignedCredentialsRefused: wrong or missing credentials, a TLS
// client on a plaintext port and a port nothing listens on fail Open
// within the connect timeout saying which; the TLS settings the v5 client
// cannot apply are refused before any connection.
func TestSignedCredentialsRefused(t *testing.T) {
	b := signingPeer(t)
	plain := signingPeer(t, rocketmqtest.WithPlaintext())
	p := tlstest.New(t)
	t.Setenv("SLUICE_TEST_ROCKETMQ_SECRET", "wrong-secret-from-env")
	q := "insecure=true&connect_timeout=" + connectTimeout.String()
	ep := b.Endpoint()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	tlstest.ExpectRefused(t, connectTimeout,
		tlstest.Refusal{Name: "wrong secret", URL: "rocketmq://" + accessKey + ":wrong-secret@" + ep + "?" + q,
			Is: ports.ErrAuth, Want: []string{"refused the credentials", "does not match"}, Secrets: []string{"wrong-secret"}},
		tlstest.Refusal{Name: "wrong secret from the environment", URL: "rocketmq://" + accessKey + "@" + ep + "?password_env=SLUICE_TEST_ROCKETMQ_SECRET&" + q,
			Is: ports.ErrAuth, Want: []string{"does not match"}, Secrets: []string{"wrong-secret-from-env"}},
		tlstest.Refusal{Name: "unknown access key", URL: "rocketmq://intruder:" + accessSecret + "@" + ep + "?" + q,
			Is: ports.ErrAuth, Want: []string{`access key "intruder" is unknown`}, Secrets: []string{accessSecret}},
		tlstest.Refusal{Name: "no credentials", URL: "rocketmq://" + ep + "?" + q,
			Is: ports.ErrAuth, Want: []string{"no access key"}},
		tlstest.Refusal{Name: "TLS client on a plaintext port", URL: "rocketmq://" + accessKey + ":" + accessSecret + "@" + plain.Endpoint() + "?" + q,
			Is: ports.ErrTLS, Want: []string{"plaintext"}, Secrets: []string{accessSecret}},
		tlstest.Refusal{Name: "nothing listens", URL: "rocketmq://" + closed + "?" + q,
			Is: ports.ErrRefused, Want: []string{"cannot reach the proxy", "connection refused"}},
		tlstest.Refusal{Name: "a CA to verify with", URL: "rocketmq://" + ep + "?" + p.CAQuery(),
			Is: ports.ErrInvalid, Want: []string{"takes no TLS configuration", "ca_file"}},
		tlstest.Refusal{Name: "a client certificate", URL: "rocketmq://" + ep + "?insecure=true&" + url.Values{"cert_file": {p.ClientCert}, "key_file": {p.ClientKey}}.Encode(),
			Is: ports.ErrInvalid, Want: []string{"takes no TLS configuration"}},
		tlstest.Refusal{Name: "a server name", URL: "rocketmq://" + ep + "?insecure=true&server_name=proxy.example",
			Is: ports.ErrInvalid, Want: []string{"server_name"}},
		tlstest.Refusal{Name: "a verifying WithTLS", URL: "rocketmq://" + ep, Options: []adapters.Option{adapters.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12})},
			Is: ports.ErrInvalid, Want: []string{"takes no TLS configuration"}},
	)
	if n := b.AuthFailures(); n < 4 {
		t.Errorf("the peer refused %d calls; want one per credential refusal (4)", n)
	}
}

// TestUnverifiedTLSIsSaid: without insecure=true Open warns that the proxy
// is not authenticated; with it, the shared warning says verification is
// off. Neither logs the secret.
func TestUnverifiedTLSIsSaid(t *testing.T) {
	b := signingPeer(t)
	for query, want := range map[string]string{
		"":               "does not verify its certificate",
		"?insecure=true": "verification is OFF",
	} {
		var logs opentest.LogBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := adapters.Open(ctx, "rocketmq://"+accessKey+":"+accessSecret+"@"+b.Endpoint()+query, adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
		cancel()
		if err != nil {
			t.Fatalf("Open%s: %v", query, err)
		}
		opentest.Close(t, a)
		if !strings.Contains(logs.String(), want) {
			t.Errorf("Open%s logged no warning saying %q:\n%s", query, want, logs.String())
		}
		tlstest.NoSecrets(t, "", &logs, accessSecret)
	}
}
