package kafka_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// SASL users of the secured kfake clusters, one per mechanism.
const (
	scram256User, scram256Pass = "alice", "alice-Pa55-256"
	scram512User, scram512Pass = "bob", "bob-Pa55-512"
	plainUser, plainPass       = "carol", "carol-Pa55-plain"
)

// connectTimeout is the bound the refusal cases hold Open to. sarama has
// no connect timeout of its own beyond Net.DialTimeout (5s), and a refused
// connection is not retried past Metadata.Retry.Max (3, 50ms apart).
const connectTimeout = 5 * time.Second

// secureCluster starts a kfake cluster that serves only TLS with server
// (its certificate; client certificates verified when given, or required
// when mtls) and SASL with one user of each mechanism.
func secureCluster(t *testing.T, server *tls.Config, mtls bool) *broker {
	t.Helper()
	if mtls {
		server = server.Clone()
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.TLS(server),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", scram256User, scram256Pass),
		kfake.Superuser("SCRAM-SHA-512", scram512User, scram512Pass),
		kfake.Superuser("PLAIN", plainUser, plainPass),
	)
	if err != nil {
		t.Fatalf("start kfake with TLS and SASL: %v", err)
	}
	t.Cleanup(c.Close)
	return &broker{addrs: c.ListenAddrs(), cluster: c}
}

// serverTLS is the PKI's broker configuration with another certificate
// (the expired one, the one for another host).
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

// clientTLS trusts the PKI's CA and, with cert, presents its client
// certificate.
func clientTLS(t *testing.T, p *tlstest.PKI, cert bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	c.RootCAs = x509.NewCertPool()
	if !c.RootCAs.AppendCertsFromPEM(pem) {
		t.Fatal("the CA file holds no certificate")
	}
	if cert {
		kp, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

// secureHarness makes TCK adapters over TLS and SASL from a code
// configuration, with kfake's fault hooks.
type secureHarness struct {
	fakeHarness
	cfg kafka.Options
}

func (h *secureHarness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return kafka.New(ctx, h.cfg)
}

// TestTLSAndSASLTCK runs the secure-transport cases of the TCK over TLS
// with each SASL mechanism, and over mutual TLS, configured in code
// (Config.TLS and Config.SASL).
func TestTLSAndSASLTCK(t *testing.T) {
	p := tlstest.New(t)
	for _, tc := range []struct {
		name string
		mtls bool
		sasl kafka.SASL
	}{
		{"scram-sha-256", false, kafka.SASL{Mechanism: kafka.SASLSCRAMSHA256, User: scram256User, Password: scram256Pass}},
		{"scram-sha-512-mtls", true, kafka.SASL{Mechanism: kafka.SASLSCRAMSHA512, User: scram512User, Password: scram512Pass}},
		{"plain", false, kafka.SASL{Mechanism: kafka.SASLPlain, User: plainUser, Password: plainPass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := secureCluster(t, p.ServerConfig(t), tc.mtls)
			cfg := b.config("tls", 2)
			cfg.TLS = clientTLS(t, p, tc.mtls)
			cfg.SASL = tc.sasl
			tck.RunCases(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
				return &secureHarness{fakeHarness: fakeHarness{harness: harness{b: b}}, cfg: cfg}, nil
			}, tck.Options{}, tck.SecureTransportCases...)
		})
	}
}

// TestOpenTLSAndSASL opens kafka+tls:// URLs with each mechanism and each
// way of giving the password, and sends one message through each.
func TestOpenTLSAndSASL(t *testing.T) {
	p := tlstest.New(t)
	b := secureCluster(t, p.ServerConfig(t), false)
	addr := b.addrs[0]
	pwFile := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(pwFile, []byte(scram512Pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_KAFKA_PASSWORD", scram256Pass)
	ca := url.QueryEscape(p.CAFile)
	for name, raw := range map[string]string{
		"scram-sha-256 from env":    "kafka+tls://" + scram256User + "@" + addr + "/tlsopen?mechanism=scram-sha-256&password_env=SLUICE_TEST_KAFKA_PASSWORD&ca_file=" + ca,
		"scram-sha-512 from file":   "kafka+tls://" + scram512User + "@" + addr + "/tlsopen?mechanism=SCRAM-SHA-512&password_file=" + url.QueryEscape(pwFile) + "&ca_file=" + ca,
		"plain inline":              "kafka+tls://" + plainUser + ":" + plainPass + "@" + addr + "/tlsopen?ca_file=" + ca,
		"scram-sha-512 mutual TLS":  "kafka+tls://" + scram512User + "@" + addr + "/tlsopen?mechanism=scram-sha-512&password_file=" + url.QueryEscape(pwFile) + "&" + p.Query(),
		"insecure (warned) + plain": "kafka+tls://" + plainUser + ":" + plainPass + "@" + addr + "/tlsopen?insecure=true",
	} {
		t.Run(name, func(t *testing.T) {
			var logs opentest.LogBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			a, err := adapters.Open(ctx, raw, adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer opentest.Close(t, a)
			if err := a.Send(ctx, ports.Message{Topic: "secured", Payload: []byte("over TLS")}); err != nil {
				t.Fatalf("Send over TLS: %v", err)
			}
			tlstest.NoSecrets(t, "", &logs, scram256Pass, scram512Pass, plainPass)
		})
	}
}

// TestTLSAndSASLRefusals: each bad TLS or SASL setting fails Open within
// the connect timeout with an error that says which.
func TestTLSAndSASLRefusals(t *testing.T) {
	p := tlstest.New(t)
	good := secureCluster(t, p.ServerConfig(t), false)
	mtls := secureCluster(t, p.ServerConfig(t), true)
	expired := secureCluster(t, serverTLS(t, p, p.ExpiredCert, p.ExpiredKey), false)
	wrongHost := secureCluster(t, serverTLS(t, p, p.WrongHostCert, p.WrongHostKey), false)
	plain := newBroker(t)
	if realKafka() {
		t.Skip("the refusals need kfake clusters; KAFKA_BROKERS is set")
	}
	ca := "ca_file=" + url.QueryEscape(p.CAFile)
	scram := func(b *broker, pass, query string) string {
		return "kafka+tls://" + scram512User + ":" + url.QueryEscape(pass) + "@" + b.addrs[0] + "/refused?mechanism=scram-sha-512&" + query
	}
	tlstest.ExpectRefused(t, connectTimeout,
		tlstest.Refusal{Name: "wrong CA", URL: scram(good, scram512Pass, "ca_file="+url.QueryEscape(p.OtherCAFile)),
			Is: ports.ErrTLS, Want: []string{"unknown authority"}, Secrets: []string{scram512Pass}},
		tlstest.Refusal{Name: "expired certificate", URL: scram(expired, scram512Pass, ca),
			Is: ports.ErrTLS, Want: []string{"expired"}, Secrets: []string{scram512Pass}},
		tlstest.Refusal{Name: "wrong host", URL: scram(wrongHost, scram512Pass, ca),
			Is: ports.ErrTLS, Want: []string{"another host"}, Secrets: []string{scram512Pass}},
		tlstest.Refusal{Name: "no client certificate where required", URL: scram(mtls, scram512Pass, ca),
			Is: ports.ErrTLS, Secrets: []string{scram512Pass}},
		tlstest.Refusal{Name: "bad SCRAM password", URL: scram(good, "not-the-password", ca),
			Is: ports.ErrAuth, Want: []string{"refused SASL SCRAM-SHA-512", `"bob"`}, Secrets: []string{"not-the-password"}},
		tlstest.Refusal{Name: "bad PLAIN password", URL: "kafka+tls://" + plainUser + ":wrong-plain@" + good.addrs[0] + "/refused?" + ca,
			Is: ports.ErrAuth, Want: []string{"refused SASL PLAIN"}, Secrets: []string{"wrong-plain"}},
		tlstest.Refusal{Name: "unknown SCRAM user", URL: "kafka+tls://mallory:" + scram512Pass + "@" + good.addrs[0] + "/refused?mechanism=scram-sha-256&" + ca,
			Is: ports.ErrAuth, Want: []string{"refused SASL SCRAM-SHA-256"}, Secrets: []string{scram512Pass}},
		tlstest.Refusal{Name: "plaintext client on the TLS port", URL: "kafka://" + good.addrs[0] + "/refused",
			Want: []string{"is a TLS listener", "use kafka+tls://"}},
		tlstest.Refusal{Name: "TLS client on a plaintext port", URL: "kafka+tls://" + plain.addrs[0] + "/refused?" + ca,
			Is: ports.ErrTLS, Want: []string{"is this a plaintext port?"}},
	)
}

// TestSASLRefusedBeforeTLSIsBlamed: kfake closes the connection after a
// refused SASL exchange; on a TLS connection that must still read as
// refused credentials, not as a TLS failure.
func TestSASLRefusedBeforeTLSIsBlamed(t *testing.T) {
	p := tlstest.New(t)
	b := secureCluster(t, p.ServerConfig(t), false)
	cfg := b.config("refused", 1)
	cfg.TLS = clientTLS(t, p, false)
	cfg.SASL = kafka.SASL{Mechanism: kafka.SASLSCRAMSHA256, User: scram256User, Password: "wrong"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*connectTimeout)
	defer cancel()
	a, err := kafka.New(ctx, cfg)
	if err == nil {
		_ = a.Close(ctx)
		t.Fatal("kafka.New with a wrong password succeeded")
	}
	if errors.Is(err, ports.ErrTLS) || !errors.Is(err, ports.ErrAuth) {
		t.Fatalf("kafka.New = %v; want ports.ErrAuth and no TLS blame", err)
	}
}

// TestSASLConfigValidated: a mechanism without a user, or an unknown
// mechanism, is refused before any connection.
func TestSASLConfigValidated(t *testing.T) {
	for _, s := range []kafka.SASL{
		{Mechanism: kafka.SASLSCRAMSHA256},
		{Password: "p"},
		{User: "u", Mechanism: "OAUTHBEARER"},
	} {
		cfg := kafka.Options{Brokers: []string{"127.0.0.1:1"}, SASL: s}
		if _, err := kafka.New(context.Background(), cfg); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("kafka.New with SASL %+v = %v; want ports.ErrInvalid", kafka.SASL{Mechanism: s.Mechanism, User: s.User}, err)
		}
	}
}
