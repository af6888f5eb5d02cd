package pulsartest

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
)

// errAuthentication is the protocol's ServerError AuthenticationError.
const errAuthentication serverError = 3

// WithTLS makes the broker serve TLS with c (its certificate, and
// ClientCAs with ClientAuth for client certificates): URL returns
// "pulsar+ssl://127.0.0.1:port" and lookups answer with that URL as the
// broker's TLS service URL, as a broker with only brokerServicePortTls
// does. A client that does not speak TLS is disconnected by the failed
// handshake. Default: plaintext. A nil c is an error.
func WithTLS(c *tls.Config) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("pulsartest: WithTLS(nil)")
		}
		if len(c.Certificates) == 0 && c.GetCertificate == nil {
			return errors.New("pulsartest: WithTLS: the config has no server certificate")
		}
		cfg.tls = c.Clone()
		return nil
	}
}

// WithTokens turns authentication on and accepts a CONNECT whose auth
// method is "token" and whose auth data is one of tokens (compared in
// constant time; the broker does not parse JWTs). Default: no
// authentication, every CONNECT is accepted. Any other CONNECT is answered
// with ERROR AuthenticationError and the connection is closed, as an
// Apache Pulsar broker with authenticationEnabled does.
func WithTokens(tokens ...string) Option {
	return func(cfg *config) error {
		if len(tokens) == 0 {
			return errors.New("pulsartest: WithTokens needs at least one token")
		}
		for _, t := range tokens {
			if t == "" {
				return errors.New("pulsartest: WithTokens: empty token")
			}
		}
		cfg.authOn = true
		cfg.tokens = append(cfg.tokens, tokens...)
		return nil
	}
}

// WithTLSAuth turns authentication on and accepts a CONNECT whose auth
// method is "tls" on a connection whose client presented a certificate the
// TLS configuration verified (WithTLS with ClientCAs and ClientAuth
// VerifyClientCertIfGiven or RequireAndVerifyClientCert). With names, the
// certificate's subject common name must be one of them (the role Pulsar's
// AuthenticationProviderTls derives). Needs WithTLS.
func WithTLSAuth(names ...string) Option {
	return func(cfg *config) error {
		cfg.authOn = true
		cfg.tlsAuth = true
		cfg.tlsNames = append(cfg.tlsNames, names...)
		return nil
	}
}

// authenticate checks CONNECT's credentials. A non-empty answer is the
// reason the connection is refused; it never quotes the auth data.
func (c *conn) authenticate(cmd connectCmd) string {
	cfg := &c.b.cfg
	if !cfg.authOn {
		return ""
	}
	switch cmd.authMethodName {
	case "token":
		for _, t := range cfg.tokens {
			if subtle.ConstantTimeCompare([]byte(t), cmd.authData) == 1 {
				return ""
			}
		}
		if len(cfg.tokens) == 0 {
			return "token authentication is not enabled on this broker"
		}
		return "the token is not valid"
	case "tls":
		if !cfg.tlsAuth {
			return "TLS authentication is not enabled on this broker"
		}
		tc, ok := c.nc.(*tls.Conn)
		if !ok {
			return "TLS authentication on a plaintext connection"
		}
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 {
			return "no client certificate was presented"
		}
		if len(cfg.tlsNames) == 0 {
			return ""
		}
		for _, n := range cfg.tlsNames {
			if certs[0].Subject.CommonName == n {
				return ""
			}
		}
		return fmt.Sprintf("the client certificate's role %q is not allowed", certs[0].Subject.CommonName)
	case "", "none":
		return "authentication is required and the client sent none"
	default:
		return fmt.Sprintf("auth method %q is not supported by the test broker", cmd.authMethodName)
	}
}
