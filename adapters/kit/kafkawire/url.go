package kafkawire

import (
	"context"
	"crypto/tls"
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

// ParseURL reads u, whose secure scheme is tlsScheme (a plaintext one was
// checked for TLS settings by adapters.RegisterBroker), and warns of a
// PLAIN password in plaintext. It consumes the mechanism parameter (the
// opener lists it in Params.Bind's also).
func ParseURL(u *url.URL, cfg *adapters.Config, tlsScheme string) (URL, error) {
	secure, k := u.Scheme == tlsScheme, URL{}
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

// Register registers b (adapters.RegisterBroker) for an adapter speaking
// the Kafka protocol: its Open reads the URL with ParseURL and hands it to
// open.
func Register(b adapters.Broker, open func(ctx context.Context, k URL, cfg *adapters.Config) (ports.Adapter, error)) {
	b.Open = func(ctx context.Context, u *url.URL, cfg *adapters.Config, _ bool) (ports.Adapter, error) {
		k, err := ParseURL(u, cfg, b.TLSScheme)
		if err != nil {
			return nil, err
		}
		return open(ctx, k, cfg)
	}
	adapters.RegisterBroker(b)
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
