package adapters

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// TLS query parameters, shared by every TLS scheme (amqps, mqtts,
// kafka+tls, pulsar+ssl, activemq+ssl, rediss).
const (
	paramCAFile     = "ca_file"
	paramCertFile   = "cert_file"
	paramKeyFile    = "key_file"
	paramServerName = "server_name"
	paramInsecure   = "insecure"
)

// tlsSettings are the TLS settings of the URL and the options, before
// they are merged with the host: what the user asked for, so that a
// plaintext scheme can refuse every one of them.
type tlsSettings struct {
	base               *tls.Config // WithTLS
	caFile             string      // ca_file or WithTLSFiles
	certFile, keyFile  string      // cert_file/key_file or WithTLSFiles
	serverName         string      // server_name
	insecure           bool        // insecure=true or WithInsecureTLS
	fromURL, fromCode  []string    // the names given, for error messages
	roots              *x509.CertPool
	clientCertificates []tls.Certificate
}

// given reports whether any TLS setting was given.
func (s *tlsSettings) given() bool { return len(s.fromURL)+len(s.fromCode) > 0 }

// names lists the settings given, for an error message.
func (s *tlsSettings) names() string {
	return strings.Join(append(append([]string(nil), s.fromURL...), s.fromCode...), ", ")
}

// WithTLSFiles sets the TLS trust and client certificate from PEM files:
// caFile holds the CA certificates that sign the broker's certificate
// (instead of the system roots), certFile and keyFile the client
// certificate and its key (mutual TLS, or the identity of SASL
// EXTERNAL). Either may be "": caFile "" keeps the system roots, certFile
// and keyFile "" present no client certificate; giving one of certFile and
// keyFile without the other is an error. The files are read by Open, and
// an unreadable or malformed file is a *ParamError naming it. Equivalent
// to the URL's ca_file, cert_file and key_file; giving both is an error.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return optionFunc(func(o *options) error {
		if (certFile == "") != (keyFile == "") {
			return &ParamError{Param: "WithTLSFiles", Reason: "give both the certificate and the key file, or neither"}
		}
		if caFile == "" && certFile == "" {
			return &ParamError{Param: "WithTLSFiles", Reason: "no file given"}
		}
		o.tlsFiles = &[3]string{caFile, certFile, keyFile}
		return nil
	})
}

// WithInsecureTLS turns off the verification of the broker's certificate:
// any certificate is accepted, so the connection is encrypted but not
// authenticated, and a man in the middle can read it. Open logs a warning
// every time it is used. For a test broker with a self-made certificate;
// prefer WithTLSFiles with the broker's CA. Equivalent to the URL's
// insecure=true. Default: verification on.
func WithInsecureTLS() Option {
	return optionFunc(func(o *options) error {
		o.insecure = true
		return nil
	})
}

// parseTLS merges the URL's TLS parameters with the options into c.
func (c *Config) parseTLS(p *Params, o *options) error {
	s := &c.tlsSet
	s.base = o.tls
	if o.tls != nil {
		s.fromCode = append(s.fromCode, "WithTLS")
	}
	if o.tlsFiles != nil {
		s.fromCode = append(s.fromCode, "WithTLSFiles")
		s.caFile, s.certFile, s.keyFile = o.tlsFiles[0], o.tlsFiles[1], o.tlsFiles[2]
	}
	if o.insecure {
		s.fromCode = append(s.fromCode, "WithInsecureTLS")
		s.insecure = true
	}
	for _, name := range []string{paramCAFile, paramCertFile, paramKeyFile, paramServerName, paramInsecure} {
		if p.has(name) {
			s.fromURL = append(s.fromURL, name)
		}
	}
	if o.tlsFiles != nil && (p.has(paramCAFile) || p.has(paramCertFile) || p.has(paramKeyFile)) {
		return &ParamError{Param: "WithTLSFiles", Reason: "TLS files given both in the URL (ca_file, cert_file, key_file) and with WithTLSFiles"}
	}
	if v, ok := p.take(paramCAFile); ok {
		s.caFile = v
	}
	if v, ok := p.take(paramCertFile); ok {
		s.certFile = v
	}
	if v, ok := p.take(paramKeyFile); ok {
		s.keyFile = v
	}
	s.serverName = p.String(paramServerName, "")
	if p.has(paramInsecure) {
		if o.insecure {
			return &ParamError{Param: paramInsecure, Reason: "given both in the URL and with WithInsecureTLS"}
		}
		s.insecure = p.Bool(paramInsecure, false)
	}
	if p.has(paramServerName) && s.serverName == "" {
		p.fail(paramServerName, "must not be empty")
	}
	if (s.certFile == "") != (s.keyFile == "") {
		p.fail(paramCertFile, "cert_file and key_file go together: give both (the client certificate and its private key), or neither")
	}
	if s.caFile != "" {
		roots, err := loadCA(s.caFile)
		if err != nil {
			return err
		}
		s.roots = roots
	}
	if s.certFile != "" && s.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return &ParamError{Param: paramCertFile, Reason: fmt.Sprintf("cannot load the client certificate %s with its key %s: %v", s.certFile, s.keyFile, scrubFileError(err))}
		}
		s.clientCertificates = []tls.Certificate{cert}
	}
	return nil
}

// loadCA reads a PEM file of CA certificates.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, &ParamError{Param: paramCAFile, Reason: fmt.Sprintf("cannot read the CA file: %v", err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &ParamError{Param: paramCAFile, Reason: fmt.Sprintf("%s holds no PEM certificate (want one or more -----BEGIN CERTIFICATE----- blocks)", path)}
	}
	return pool, nil
}

// scrubFileError keeps a key-loading error from quoting key material:
// crypto/tls quotes nothing, but a wrapped parse error might.
func scrubFileError(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "-----BEGIN") {
		return "malformed PEM data"
	}
	return msg
}

// TLS returns the TLS configuration of a TLS scheme: a clone of the one
// given with WithTLS (or a new one with the system roots and TLS 1.2 or
// later), with the URL's or WithTLSFiles' CA and client certificate, the
// server_name parameter or else the URL's host as the server name, and
// verification off only for insecure=true or WithInsecureTLS. When
// verification is off it logs a warning, every call: openers call it once
// per Open.
func (c *Config) TLS() *tls.Config {
	s := &c.tlsSet
	t := ClientTLS(s.base, "") // the server name is settled below
	if s.roots != nil {
		t.RootCAs = s.roots
	}
	if len(s.clientCertificates) > 0 {
		t.Certificates = s.clientCertificates
	}
	if s.serverName != "" {
		t.ServerName = s.serverName
	}
	if s.insecure {
		t.InsecureSkipVerify = true
	}
	if t.ServerName == "" && !t.InsecureSkipVerify {
		t.ServerName = c.host
	}
	if t.InsecureSkipVerify {
		c.Logger.Warn("sluice: TLS certificate verification is OFF: the connection is encrypted but the broker is not authenticated, so anyone on the path can read and change it; give the broker's CA (ca_file= or adapters.WithTLSFiles) instead of insecure=true / WithInsecureTLS / InsecureSkipVerify",
			"scheme", c.Scheme, "host", c.host)
	}
	return t
}

// ClientTLS returns a copy of cfg (nil: the system roots, TLS 1.2 or
// later) that verifies the broker's certificate for host unless cfg names
// a server or turns verification off, for a driver that does the TLS
// handshake itself.
func ClientTLS(cfg *tls.Config, host string) *tls.Config {
	if cfg == nil {
		return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	c := cfg.Clone()
	if c.ServerName == "" && !c.InsecureSkipVerify {
		c.ServerName = host
	}
	return c
}

// CustomTLS reports whether any TLS setting was given: WithTLS,
// WithTLSFiles, WithInsecureTLS, or a TLS query parameter.
func (c *Config) CustomTLS() bool { return c.tlsSet.given() }

// ClientCertificate reports whether a client certificate was given
// (cert_file/key_file, WithTLSFiles, or WithTLS with Certificates or
// GetClientCertificate), for adapters whose authentication by certificate
// (SASL EXTERNAL, an MQTT identity) needs one.
func (c *Config) ClientCertificate() bool {
	s := &c.tlsSet
	if len(s.clientCertificates) > 0 {
		return true
	}
	return s.base != nil && (len(s.base.Certificates) > 0 || s.base.GetClientCertificate != nil)
}
