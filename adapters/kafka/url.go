package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// kafka:// and kafka+tls:// open the adapter; the parameters are in
// docs/adapters/kafka.md.
func init() {
	adapters.Register("kafka", adapters.OpenerFunc(openKafka))
	adapters.Register("kafka+tls", adapters.OpenerFunc(openKafka))
}

func openKafka(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	secure := u.Scheme == "kafka+tls"
	if !secure {
		if err := cfg.PlainOnly("kafka+tls"); err != nil {
			return nil, err
		}
	}
	var kc Options
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			kc.Brokers = append(kc.Brokers, h)
		}
	}
	if len(kc.Brokers) == 0 {
		return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs at least one broker address, e.g. " + u.Scheme + "://127.0.0.1:9092"}
	}
	if kc.Namespace = strings.Trim(u.Path, "/"); kc.Namespace != "" && cfg.Namespace != "" {
		return nil, &adapters.ParamError{Param: "namespace", Reason: "given both as the URL path and as the namespace parameter or option"}
	}
	kc.Namespace = cmp.Or(kc.Namespace, cfg.Namespace)

	kc.Logger = cfg.Logger
	p := cfg.Params
	kc.NoCreateTopics = !p.Bool("create_topics", true)
	kc.DisableIdempotence = !p.Bool("idempotent", true)
	mechanism := p.String("mechanism", "")
	if err := p.Bind(&kc, "create_topics", "idempotent", "mechanism"); err != nil {
		return nil, err
	}
	if mechanism != "" {
		if !cfg.HasCredentials {
			return nil, &adapters.ParamError{Param: "mechanism", Reason: "a SASL mechanism needs a user name and password: kafka+tls://user@host?mechanism=…&password_file=…"}
		}
		m, err := ParseSASLMechanism(mechanism)
		if err != nil {
			return nil, &adapters.ParamError{Param: "mechanism", Reason: fmt.Sprintf("%q is not plain, scram-sha-256 or scram-sha-512", mechanism)}
		}
		kc.SASL.Mechanism = m
	}
	if cfg.HasCredentials {
		kc.SASL.User, kc.SASL.Password = cfg.Username, cfg.Password
		if !secure && (kc.SASL.Mechanism == "" || kc.SASL.Mechanism == SASLPlain) {
			cfg.Logger.Warn("sluice: kafka:// with SASL PLAIN sends the password unencrypted; use kafka+tls:// (or mechanism=scram-sha-512)")
		}
	}
	if secure {
		kc.TLS = cfg.TLS()
		if kc.TLS.ServerName == u.Hostname() {
			kc.TLS.ServerName = "" // each broker by its own host name
		}
	}
	a, err := New(ctx, kc)
	if err != nil {
		if errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrAuth) || errors.Is(err, ports.ErrTLS) || ctx.Err() != nil ||
			errors.As(err, new(*plaintextOnTLSError)) {
			return nil, err
		}
		return nil, fmt.Errorf("%w; check that a Kafka broker listens at %s, that it is reachable from here and advertises an address reachable from here too", err, u.Host)
	}
	return a, nil
}
