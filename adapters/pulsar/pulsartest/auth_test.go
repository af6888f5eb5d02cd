package pulsartest_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

// logLines collects what a client logs, to read why it was refused.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(b))
	l.mu.Unlock()
	return len(b), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// authClient connects a plain client with opts to b (its URL and a short
// operation timeout filled in).
func authClient(t *testing.T, b *pulsartest.Broker, opts pulsar.ClientOptions) pulsar.Client {
	t.Helper()
	opts.URL = b.URL()
	opts.ConnectionTimeout = 2 * time.Second
	opts.OperationTimeout = 2 * time.Second
	if opts.Logger == nil {
		opts.Logger = log.DefaultNopLogger()
	}
	opts.MetricsRegisterer = prometheus.NewRegistry()
	c, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// roundTrip sends one message and receives it.
func roundTrip(t *testing.T, c pulsar.Client) {
	t.Helper()
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("secured")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if string(m.Payload()) != "secured" {
		t.Fatalf("received %q", m.Payload())
	}
}

// TestTLSListenerWithTokenAndCertificateAuth: the broker serves TLS, and
// with WithTokens and WithTLSAuth accepts the right token or client
// certificate and refuses everything else at CONNECT.
func TestTLSListenerWithTokenAndCertificateAuth(t *testing.T) {
	p := tlstest.New(t)
	b := startBroker(t, pulsartest.WithTLS(p.ServerConfig(t)), pulsartest.WithTokens("good-token"), pulsartest.WithTLSAuth(p.ClientName))
	if !strings.HasPrefix(b.URL(), "pulsar+ssl://127.0.0.1:") {
		t.Fatalf("URL = %q, want pulsar+ssl://127.0.0.1:port", b.URL())
	}
	tlsOpts := pulsar.ClientOptions{TLSTrustCertsFilePath: p.CAFile, TLSValidateHostname: true}

	t.Run("token", func(t *testing.T) {
		o := tlsOpts
		o.Authentication = pulsar.NewAuthenticationToken("good-token")
		roundTrip(t, authClient(t, b, o))
	})
	t.Run("client certificate", func(t *testing.T) {
		o := tlsOpts
		o.Authentication = pulsar.NewAuthenticationTLS(p.ClientCert, p.ClientKey)
		roundTrip(t, authClient(t, b, o))
	})
	for name, auth := range map[string]pulsar.Authentication{
		"wrong token":      pulsar.NewAuthenticationToken("bad-token"),
		"no credentials":   nil,
		"certificate role": pulsar.NewAuthenticationTLS(p.Client(t, "intruder")),
	} {
		t.Run("refused "+name, func(t *testing.T) {
			var logs logLines
			o := tlsOpts
			o.Authentication = auth
			o.Logger = log.NewLoggerWithSlog(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			c := authClient(t, b, o)
			before := b.Counters().Connections
			_, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t)})
			if err == nil {
				t.Fatal("CreateProducer succeeded with refused credentials")
			}
			if b.Counters().Connections == before {
				t.Fatal("the client never connected")
			}
			if !strings.Contains(logs.String(), "pulsartest: authentication failed") {
				t.Errorf("the client did not log the broker's refusal; its log:\n%s", logs.String())
			}
		})
	}
}

// TestTLSListenerRefusesPlaintextClient: a client without TLS on the TLS
// port gets no answer it can read and fails within its timeout.
func TestTLSListenerRefusesPlaintextClient(t *testing.T) {
	p := tlstest.New(t)
	b := startBroker(t, pulsartest.WithTLS(p.ServerConfig(t)))
	bad, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               "pulsar://" + strings.TrimPrefix(b.URL(), "pulsar+ssl://"),
		ConnectionTimeout: time.Second, OperationTimeout: 2 * time.Second,
		Logger: log.DefaultNopLogger(), MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	start := time.Now()
	if _, err := bad.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t)}); err == nil {
		t.Fatal("a plaintext client produced on the TLS port")
	}
	if took := time.Since(start); took > 4*wait {
		t.Fatalf("the refusal took %v", took)
	}
}

func TestWithTLSValidates(t *testing.T) {
	if _, err := pulsartest.Start(pulsartest.WithTLSAuth()); err == nil || !strings.Contains(err.Error(), "needs WithTLS") {
		t.Errorf("WithTLSAuth without WithTLS = %v", err)
	}
	if _, err := pulsartest.Start(pulsartest.WithTokens()); err == nil {
		t.Error("WithTokens() with no token accepted")
	}
}
