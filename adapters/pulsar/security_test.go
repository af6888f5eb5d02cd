package pulsar_test

import (
	"context"
	"crypto/tls"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// The token the secured test brokers accept (pulsartest compares it as
// an opaque string, as a broker's token provider compares the signed JWT
// it decodes), and the connect timeout the refusals are held to.
const (
	goodToken      = "eyJhbGciOiJIUzI1NiJ9.c2x1aWNlLXRlc3Q.good-token-signature"
	connectTimeout = 3 * time.Second
)

// secureBroker starts pulsartest serving TLS with server, accepting
// goodToken and the PKI's client certificate (TLS authentication).
func secureBroker(t *testing.T, p *tlstest.PKI, server *tls.Config) *pulsartest.Broker {
	t.Helper()
	b, err := pulsartest.Start(pulsartest.WithLogf(t.Logf), pulsartest.WithTLS(server),
		pulsartest.WithTokens(goodToken), pulsartest.WithTLSAuth(p.ClientName))
	if err != nil {
		t.Fatalf("start pulsartest with TLS: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// serverTLS is the PKI's broker configuration with another certificate.
func serverTLS(t *testing.T, p *tlstest.PKI, cert, key string) *tls.Config {
	t.Helper()
	c := p.ServerConfig(t)
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c.Certificates = []tls.Certificate{kp}
	return c
}

// hostOf is the broker's host:port.
func hostOf(t *testing.T, b *pulsartest.Broker) string {
	t.Helper()
	u, err := url.Parse(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// openHarness opens every TCK adapter with adapters.Open on one URL, so
// the whole opener path (secrets from files, TLS files, the handshake) is
// what the cases run over.
type openHarness struct{ url string }

func (h openHarness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return adapters.Open(ctx, h.url, adapters.NotExclusive())
}

func (openHarness) Close() {}

// TestSecureTransportTCK runs the secure-transport cases of the TCK over
// pulsar+ssl:// with a token read from a file, and with TLS
// authentication (the client certificate as the identity).
func TestSecureTransportTCK(t *testing.T) {
	p := tlstest.New(t)
	b := secureBroker(t, p, p.ServerConfig(t))
	tokenFile := filepath.Join(t.TempDir(), "pulsar-token")
	if err := os.WriteFile(tokenFile, []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, query := range map[string]string{
		"token from file":    "token_file=" + url.QueryEscape(tokenFile) + "&" + p.CAQuery(),
		"TLS authentication": p.Query(),
	} {
		t.Run(name, func(t *testing.T) {
			raw := "pulsar+ssl://" + hostOf(t, b) + "/?requeue_tick=9ms&connect_timeout=5s&" + query
			tck.RunCases(t, func(context.Context, *testing.T) (tck.Harness, error) {
				return openHarness{url: raw}, nil
			}, tck.Options{}, tck.SecureTransportCases...)
		})
	}
}

// TestOpenSecure opens pulsar+ssl:// with the token inline, from the
// environment and in code (Options.Authentication and Options.TLS), and
// checks the token is in no log line.
func TestOpenSecure(t *testing.T) {
	p := tlstest.New(t)
	b := secureBroker(t, p, p.ServerConfig(t))
	t.Setenv("SLUICE_TEST_PULSAR_TOKEN", goodToken)
	for name, raw := range map[string]string{
		"inline": "pulsar+ssl://" + hostOf(t, b) + "/?token=" + url.QueryEscape(goodToken) + "&" + p.CAQuery(),
		"env":    "pulsar+ssl://" + hostOf(t, b) + "/?token_env=SLUICE_TEST_PULSAR_TOKEN&" + p.CAQuery(),
	} {
		t.Run(name, func(t *testing.T) {
			var logs opentest.LogBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a, err := adapters.Open(ctx, raw, adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if err := a.Send(ctx, ports.Message{Topic: "secured", Payload: []byte("over TLS")}); err != nil {
				t.Errorf("Send over TLS with a token: %v", err)
			}
			opentest.Close(t, a)
			tlstest.NoSecrets(t, "", &logs, goodToken)
		})
	}
	t.Run("code", func(t *testing.T) {
		ca := p.ServerConfig(t).ClientCAs // the PKI's CA
		a, err := pulsar.New(context.Background(), pulsar.Options{URL: b.URL(), Authentication: pulsarclient.NewAuthenticationToken(goodToken),
			TLS: &tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer opentest.Close(t, a)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Send(ctx, ports.Message{Topic: "secured", Payload: []byte("over TLS")}); err != nil {
			t.Errorf("Send with Options.Authentication and TLS: %v", err)
		}
	})
}

// TestSecureRefusals: each bad TLS setting or credential fails Open within
// the connect timeout, saying which.
func TestSecureRefusals(t *testing.T) {
	p := tlstest.New(t)
	good := hostOf(t, secureBroker(t, p, p.ServerConfig(t)))
	expired := hostOf(t, secureBroker(t, p, serverTLS(t, p, p.ExpiredCert, p.ExpiredKey)))
	wrongHost := hostOf(t, secureBroker(t, p, serverTLS(t, p, p.WrongHostCert, p.WrongHostKey)))
	plain := hostOf(t, startPlain(t))
	intruderCert, intruderKey := p.Client(t, "intruder")
	timeout := "connect_timeout=" + connectTimeout.String()
	tok := "token=" + url.QueryEscape(goodToken)
	u := func(host string, query ...string) string {
		return "pulsar+ssl://" + host + "/?" + strings.Join(append(query, timeout), "&")
	}
	files := func(ca, cert, key string) string {
		return url.Values{"ca_file": {ca}, "cert_file": {cert}, "key_file": {key}}.Encode()
	}
	tlstest.ExpectRefused(t, connectTimeout,
		tlstest.Refusal{Name: "wrong CA", URL: u(good, tok, "ca_file="+url.QueryEscape(p.OtherCAFile)),
			Is: ports.ErrTLS, Want: []string{"unknown authority"}, Secrets: []string{goodToken}},
		tlstest.Refusal{Name: "expired certificate", URL: u(expired, tok, p.CAQuery()),
			Is: ports.ErrTLS, Want: []string{"expired"}, Secrets: []string{goodToken}},
		tlstest.Refusal{Name: "wrong host", URL: u(wrongHost, tok, p.CAQuery()),
			Is: ports.ErrTLS, Want: []string{"another host"}, Secrets: []string{goodToken}},
		tlstest.Refusal{Name: "bad token", URL: u(good, "token=not-the-token", p.CAQuery()),
			Is: ports.ErrAuth, Want: []string{"refused the token authentication", "the token is not valid"}, Secrets: []string{"not-the-token"}},
		tlstest.Refusal{Name: "no credentials", URL: u(good, p.CAQuery()),
			Is: ports.ErrAuth, Want: []string{"refused the none authentication"}},
		// Go's TLS client presents a certificate only when its issuer is
		// one the broker asks for, so the broker sees none.
		tlstest.Refusal{Name: "client certificate of an untrusted CA", URL: u(good, files(p.CAFile, p.OtherClientCert, p.OtherClientKey)),
			Is: ports.ErrAuth, Want: []string{"refused the tls authentication", "no client certificate was presented"}},
		tlstest.Refusal{Name: "client certificate of a role not allowed", URL: u(good, files(p.CAFile, intruderCert, intruderKey)),
			Is: ports.ErrAuth, Want: []string{"refused the tls authentication", `"intruder" is not allowed`}},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "pulsar://" + good + "/?" + tok + "&" + timeout,
			Want: []string{"is this a TLS port?", "pulsar+ssl://"}, Secrets: []string{goodToken}},
		tlstest.Refusal{Name: "TLS client on a plaintext port", URL: u(plain, p.CAQuery()),
			Is: ports.ErrTLS},
	)
}

func startPlain(t *testing.T) *pulsartest.Broker {
	t.Helper()
	b, err := pulsartest.Start(pulsartest.WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
