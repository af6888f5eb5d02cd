package kafkawire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// URL is what the Kafka adapters read alike from
// scheme://[user[:password]@]host:port[,host:port…][/namespace]?mechanism=….
type URL struct {
	Brokers   []string
	Namespace string // the path, else the namespace parameter
	// Mechanism is the SASL mechanism as Kafka spells it; "" when not
	// given (PLAIN with credentials).
	Mechanism      string
	User, Password string      // a User turns SASL on
	TLS            *tls.Config // the secure scheme's: each broker verified by its own host name
}

// ParseURL reads u, whose secure scheme is tlsScheme: a plaintext scheme
// refuses TLS settings and warns of a PLAIN password. It consumes the
// mechanism parameter (the opener lists it in Params.Bind's also).
func ParseURL(u *url.URL, cfg *adapters.Config, tlsScheme string) (URL, error) {
	secure := u.Scheme == tlsScheme
	if !secure {
		if err := cfg.PlainOnly(tlsScheme); err != nil {
			return URL{}, err
		}
	}
	var k URL
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			k.Brokers = append(k.Brokers, h)
		}
	}
	if len(k.Brokers) == 0 {
		return URL{}, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs at least one broker address, e.g. " + u.Scheme + "://127.0.0.1:9092"}
	}
	var err error
	if k.Namespace, err = cfg.PathNamespace(u); err != nil {
		return URL{}, err
	}
	if m := cfg.Params.String("mechanism", ""); m != "" {
		if !cfg.HasCredentials {
			return URL{}, &adapters.ParamError{Param: "mechanism", Reason: "a SASL mechanism needs a user name and password: " + tlsScheme + "://user@host?mechanism=…&password_file=…"}
		}
		if k.Mechanism, err = ParseMechanism(m); err != nil {
			return URL{}, &adapters.ParamError{Param: "mechanism", Reason: err.Error()}
		}
	}
	if cfg.HasCredentials {
		k.User, k.Password = cfg.Username, cfg.Password
		if !secure && !strings.HasPrefix(k.Mechanism, "SCRAM") {
			cfg.Logger.Warn("sluice: " + u.Scheme + ":// with SASL PLAIN sends the password unencrypted; use " + tlsScheme + ":// (or mechanism=scram-sha-512)")
		}
	}
	if secure {
		k.TLS = cfg.TLS()
		if k.TLS.ServerName == u.Hostname() {
			k.TLS.ServerName = "" // each broker by its own host name
		}
	}
	return k, nil
}

// ParseMechanism returns the SASL mechanism s names, case-insensitively,
// as Kafka spells it.
func ParseMechanism(s string) (string, error) {
	for _, m := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		if strings.EqualFold(s, m) {
			return m, nil
		}
	}
	return "", fmt.Errorf("%q is not plain, scram-sha-256 or scram-sha-512", s)
}

// OpenErr is what an opener returns when New failed with err: err itself
// when the caller has to fix it (invalid, credentials, TLS, a plaintext
// client on a TLS listener) or ctx ended, else err and what to check
// (completing "check that …").
func OpenErr(ctx context.Context, err error, check string) error {
	if errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrAuth) || errors.Is(err, ports.ErrTLS) || ctx.Err() != nil ||
		errors.As(err, new(*adapters.PlaintextOnTLSError)) {
		return err
	}
	return fmt.Errorf("%w; check that %s", err, check)
}
