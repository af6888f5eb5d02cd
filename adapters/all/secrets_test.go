package all_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/internal/tlstest"
	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// refusingBrokers are the in-process brokers that check credentials and
// refuse the test's: Kafka with SASL (plaintext and TLS), Pulsar with
// tokens (plaintext and TLS), RocketMQ with signed requests. The other
// schemes are opened against a port nothing listens on.
type refusingBrokers struct {
	kafka, kafkaTLS, pulsar, pulsarTLS, rocketmq string
	caFile                                       string
}

func startRefusing(t *testing.T) refusingBrokers {
	t.Helper()
	p := tlstest.New(t)
	kc := func(opts ...kfake.Opt) string {
		c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL(),
			kfake.Superuser("SCRAM-SHA-512", "owner", "owner-password"),
			kfake.Superuser("PLAIN", "plain-owner", "owner-password")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()[0]
	}
	pb := func(opts ...pulsartest.Option) string {
		b, err := pulsartest.Start(append([]pulsartest.Option{pulsartest.WithTokens("the-only-good-token")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		u, _ := url.Parse(b.URL())
		return u.Host
	}
	rb, err := rocketmqtest.Start(rocketmqtest.WithCredentials("owner", "owner-secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })
	return refusingBrokers{
		kafka: kc(), kafkaTLS: kc(kfake.TLS(p.ServerConfig(t))),
		pulsar: pb(), pulsarTLS: pb(pulsartest.WithTLS(p.ServerConfig(t))),
		rocketmq: rb.Endpoint(), caFile: p.CAFile,
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// credentialCase is one Open whose credentials must be refused and must
// appear nowhere.
type credentialCase struct {
	name, url string
	secret    string
}

// credentialCases gives every scheme its credentials inline, from a file
// and from the environment (and the Pulsar token the same three ways).
func credentialCases(t *testing.T, b refusingBrokers) []credentialCase {
	dead := closedPort(t)
	dir := t.TempDir()
	ca := "ca_file=" + url.QueryEscape(b.caFile)
	hosts := map[string]string{
		"kafka": b.kafka, "kafka+tls": b.kafkaTLS + "?" + ca + "&",
		"kafkaqueue": b.kafka, "kafkaqueues": b.kafkaTLS + "?" + ca + "&",
		"pulsar": b.pulsar + "/", "pulsar+ssl": b.pulsarTLS + "/?" + ca + "&",
		"rocketmq": b.rocketmq + "?insecure=true&", "mqtt+embedded": "/", "mem": "",
		"mqtt": dead + "/?connect_timeout=1s&", "mqtts": dead + "/?connect_timeout=1s&",
	}
	var out []credentialCase
	for _, scheme := range schemes {
		host, ok := hosts[scheme]
		if !ok {
			host = dead + "/"
		}
		base, query, _ := strings.Cut(host, "?")
		join := func(q string) string {
			if query != "" {
				q = query + q
			}
			if q == "" {
				return base
			}
			return base + "?" + strings.TrimSuffix(q, "&")
		}
		inline := "S3cret-inline-" + scheme
		fromFile := "S3cret-file-" + scheme
		fromEnv := "S3cret-env-" + scheme
		file := filepath.Join(dir, strings.ReplaceAll(scheme, "+", "_")+"-password")
		if err := os.WriteFile(file, []byte(fromFile+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env := "SLUICE_SECRET_" + strings.ToUpper(strings.NewReplacer("+", "_").Replace(scheme))
		t.Setenv(env, fromEnv)
		out = append(out,
			credentialCase{scheme + " inline", scheme + "://someone:" + url.QueryEscape(inline) + "@" + join(""), inline},
			credentialCase{scheme + " password_file", scheme + "://someone@" + join("password_file="+url.QueryEscape(file)), fromFile},
			credentialCase{scheme + " password_env", scheme + "://someone@" + join("password_env="+env), fromEnv},
		)
		if strings.HasPrefix(scheme, "pulsar") {
			tokenFile := filepath.Join(dir, scheme+"-token")
			if err := os.WriteFile(tokenFile, []byte("T0ken-file-"+scheme), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv(env+"_TOKEN", "T0ken-env-"+scheme)
			out = append(out,
				credentialCase{scheme + " token", scheme + "://" + join("token=T0ken-inline-"+scheme+"&"), "T0ken-inline-" + scheme},
				credentialCase{scheme + " token_file", scheme + "://" + join("token_file="+url.QueryEscape(tokenFile)+"&"), "T0ken-file-" + scheme},
				credentialCase{scheme + " token_env", scheme + "://" + join("token_env="+env+"_TOKEN&"), "T0ken-env-" + scheme},
			)
		}
	}
	return out
}

// TestNoSecretInErrorsOrLogs opens every scheme with credentials the
// broker refuses (or with nothing listening) and checks that the secret
// appears neither in the error nor in any log line, at every level: the
// logger given to Open and the process default logger both record Debug.
func TestNoSecretInErrorsOrLogs(t *testing.T) {
	b := startRefusing(t)
	var global opentest.LogBuffer
	prev := slog.Default()
	slog.SetDefault(global.Logger())
	t.Cleanup(func() { slog.SetDefault(prev) })

	cases := credentialCases(t, b)
	if len(cases) < 3*len(schemes) {
		t.Fatalf("only %d cases for %d schemes", len(cases), len(schemes))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs opentest.LogBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := adapters.Open(ctx, c.url, adapters.NotExclusive(), adapters.WithLogger(logs.Logger()))
			if err == nil {
				// Only the in-process MQTT broker takes any credentials.
				if !strings.HasPrefix(c.name, "mqtt+embedded") {
					t.Errorf("Open accepted credentials the broker does not know")
				}
				opentest.Close(t, a)
			} else {
				t.Logf("refused: %v", err)
				if strings.Contains(err.Error(), c.secret) {
					t.Errorf("the secret appears in the error: %v", err)
				}
			}
			tlstest.NoSecrets(t, "", &logs, c.secret)
			tlstest.NoSecrets(t, "", &global, c.secret)
		})
	}
}

// TestRefusedCredentialsSayAuth: where the broker checks credentials, the
// refusal is an adapters.ErrAuth error, not a connection or TLS failure.
func TestRefusedCredentialsSayAuth(t *testing.T) {
	b := startRefusing(t)
	ca := "ca_file=" + url.QueryEscape(b.caFile)
	for _, raw := range []string{
		"kafka://owner:wrong@" + b.kafka + "/?mechanism=scram-sha-512",
		"kafka+tls://plain-owner:wrong@" + b.kafkaTLS + "/?" + ca,
		"kafkaqueue://owner:wrong@" + b.kafka + "/?mechanism=scram-sha-512",
		"kafkaqueues://plain-owner:wrong@" + b.kafkaTLS + "/?" + ca,
		"pulsar://" + b.pulsar + "/?token=wrong",
		"pulsar+ssl://" + b.pulsarTLS + "/?token=wrong&" + ca,
		"rocketmq://owner:wrong@" + b.rocketmq + "?insecure=true",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a, err := adapters.Open(ctx, raw, adapters.NotExclusive())
		cancel()
		if err == nil {
			opentest.Close(t, a)
			t.Errorf("Open(%s) succeeded with wrong credentials", adapters.Redact(mustParse(t, raw)))
			continue
		}
		if !errors.Is(err, adapters.ErrAuth) || errors.Is(err, adapters.ErrTLS) {
			t.Errorf("Open(%s) = %v; want adapters.ErrAuth (and not ErrTLS)", adapters.Redact(mustParse(t, raw)), err)
		}
	}
}

// TestPayloadsNotLoggedByDefault: a pipeline whose handler fails, poisons
// and panics on messages logs at every level without any payload.
func TestPayloadsNotLoggedByDefault(t *testing.T) {
	var logs opentest.LogBuffer
	broker, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = broker.Close(context.Background()) }()
	a, err := mem.New(broker)
	if err != nil {
		t.Fatal(err)
	}
	defer opentest.Close(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := ports.SubscriptionSpec{Topic: "cards", Group: "billing", Retry: ports.RetryPolicy{MaxAttempts: 2, Backoff: time.Millisecond}}
	p := flow.New(a, spec, flow.WithLogger(logs.Logger()), flow.WithErrorHandler(func(error) {}))
	type card struct {
		Number string `json:"number"`
		Kind   string `json:"kind"`
	}
	flow.Sink(flow.Decode[card](p.Source()), func(ctx context.Context, c card) error {
		switch c.Kind {
		case "poison":
			return ports.Poisonf("card refused")
		case "fail":
			return fmt.Errorf("card service down")
		default:
			panic("card handler panicked")
		}
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	markers := []string{"4111-1111-PAYLOAD-POISON", "4111-1111-PAYLOAD-FAIL", "4111-1111-PAYLOAD-PANIC", "NOT-JSON-PAYLOAD-4111"}
	msgs := []ports.Message{
		{Topic: "cards", Payload: []byte(`{"number":"` + markers[0] + `","kind":"poison"}`)},
		{Topic: "cards", Payload: []byte(`{"number":"` + markers[1] + `","kind":"fail"}`)},
		{Topic: "cards", Payload: []byte(`{"number":"` + markers[2] + `","kind":"panic"}`)},
		{Topic: "cards", Payload: []byte(markers[3])},
	}
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// Every message ends dead-lettered: poison and undecodable at once,
	// the failing and the panicking one after their two attempts.
	// Settlements: two dead letters, and for each of the other two a
	// requeue then a dead letter.
	if err := p.WaitSettled(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.DeadLettered != int64(len(msgs)) {
		t.Fatalf("dead-lettered %d of %d: %+v", st.DeadLettered, len(msgs), st)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "card handler panicked") {
		t.Fatalf("the pipeline logged nothing about the panic, so the check below proves nothing:\n%s", out)
	}
	for _, m := range markers {
		if strings.Contains(out, m) {
			t.Errorf("a payload appears in the logs (%q):\n%s", m, out)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
