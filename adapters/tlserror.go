package adapters

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Sentinel errors of a refused connection: the portable codes of package
// ports under the names adapters have always used, so that
// errors.Is(err, adapters.ErrTLS) and errors.Is(err, ports.ErrTLS) are one
// test. The error's text says which check failed and what to do.
var (
	// ErrTLS is ports.ErrTLS: the TLS handshake with the broker failed —
	// its certificate is not trusted, has expired or names another host,
	// it refused this client's certificate, or one side does not speak
	// TLS at all.
	ErrTLS = ports.ErrTLS
	// ErrAuth is ports.ErrAuth: the broker refused the credentials (user
	// name and password, token, or the client certificate as the
	// identity).
	ErrAuth = ports.ErrAuth
)

// TLSError is the error of a failed TLS handshake, made by [ExplainTLS].
// errors.Is(err, ErrTLS) holds.
type TLSError struct {
	// Addr is the broker's address, without credentials.
	Addr string
	// Reason says which check failed and what to do.
	Reason string
	// Err is the error of the TLS library or the broker client.
	Err error
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS with %s: %s (%v)", e.Addr, e.Reason, e.Err)
}

// Unwrap returns the cause.
func (e *TLSError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTLS) true.
func (e *TLSError) Is(target error) bool { return target == ErrTLS }

// ExplainTLS returns err as a *TLSError saying precisely why the TLS
// connection to addr failed, when err is one it recognises: the broker's
// certificate signed by an untrusted authority, expired (or not yet
// valid), or issued for another host; a TLS alert from the broker (it
// refused this client's certificate, or has no protocol version in
// common); a plaintext answer (the port is not a TLS port); or the
// connection closed during the handshake (not a TLS port, or a broker
// that refuses a client without an alert). Otherwise it returns err as it
// is; nil stays nil, and an error already wrapping ErrTLS is returned
// unchanged.
//
// Call it only for a TLS connection, with the error of its dial,
// handshake or first exchange: on a plaintext connection a closed
// connection means something else, and the explanation would mislead.
// Broker clients that flatten errors into text are recognised by the
// crypto/tls and crypto/x509 messages.
func ExplainTLS(addr string, err error) error {
	if err == nil || errors.Is(err, ErrTLS) {
		return err
	}
	if reason := tlsReason(err); reason != "" {
		return &TLSError{Addr: addr, Reason: reason, Err: err}
	}
	return err
}

func tlsReason(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		record   tls.RecordHeaderError
		alert    tls.AlertError
	)
	text := err.Error()
	switch {
	case errors.As(err, &unknown):
		issuer := ""
		if unknown.Cert != nil {
			issuer = fmt.Sprintf(" (its issuer is %q)", unknown.Cert.Issuer.String())
		}
		return "the broker's certificate is signed by an authority this client does not trust" + issuer +
			": unknown authority; give the CA that signed it with ca_file= or adapters.WithTLSFiles, or install it in the system roots"
	case strings.Contains(text, "x509: certificate signed by unknown authority"):
		return "the broker's certificate is signed by an authority this client does not trust: unknown authority; give the CA that signed it with ca_file= or adapters.WithTLSFiles, or install it in the system roots"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return expiredReason(invalid.Cert)
	case strings.Contains(text, "x509: certificate has expired or is not yet valid"):
		return expiredReason(nil)
	case errors.As(err, &hostname):
		return fmt.Sprintf("the broker's certificate is for another host: %v; connect with a host name it is valid for, or set server_name= to the name on the certificate", hostname.Error())
	case strings.Contains(text, "x509: certificate is valid for") || strings.Contains(text, "x509: certificate is not valid for any names") ||
		strings.Contains(text, "x509: cannot validate certificate for"):
		return "the broker's certificate is for another host (wrong host name); connect with a host name it is valid for, or set server_name= to the name on the certificate"
	case errors.As(err, &alert):
		return alertReason(alert.Error())
	case strings.Contains(text, "remote error: tls: "):
		return alertReason(text[strings.Index(text, "remote error: tls: ")+len("remote error: tls: "):])
	case errors.As(err, &record) || strings.Contains(text, "tls: first record does not look like a TLS handshake"):
		return "the broker answered in plaintext, not TLS: is this a plaintext port? use the broker's TLS port, or the plaintext scheme"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(text, "connection reset by peer"):
		return "the broker closed the connection during or right after the TLS handshake: not a TLS port? (a plaintext listener drops a TLS hello), or the broker refused this client's certificate and its alert was lost with the connection (none given where it requires one, expired, or signed by a CA it does not trust)"
	}
	return ""
}

func expiredReason(c *x509.Certificate) string {
	if c == nil {
		return "the broker's certificate has expired or is not yet valid: renew it on the broker (and check this machine's clock)"
	}
	now := time.Now()
	if now.Before(c.NotBefore) {
		return fmt.Sprintf("the broker's certificate is not yet valid (valid from %s; now %s): check the clocks, or renew it", c.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the broker's certificate has expired (on %s; now %s): renew it on the broker", c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
}

// alertReason explains a TLS alert the broker sent, named as crypto/tls
// names it ("bad certificate").
func alertReason(alert string) string {
	alert = strings.TrimSpace(alert)
	if i := strings.IndexAny(alert, "\n;\"\\"); i > 0 {
		alert = alert[:i]
	}
	base := fmt.Sprintf("the broker refused the TLS handshake with the alert %q", alert)
	switch {
	case strings.Contains(alert, "certificate required"):
		return base + ": it requires a client certificate and this client sent none: give one with cert_file= and key_file= (or adapters.WithTLSFiles), signed by a CA the broker trusts (a client sends no certificate the broker's list of CAs does not accept)"
	case strings.Contains(alert, "bad certificate"), strings.Contains(alert, "unknown certificate"),
		strings.Contains(alert, "certificate expired"), strings.Contains(alert, "expired certificate"), strings.Contains(alert, "certificate revoked"),
		strings.Contains(alert, "unsupported certificate"), strings.Contains(alert, "access denied"):
		return base + ": it did not accept this client's certificate: check that cert_file is signed by a CA the broker trusts, still valid, and given at all where the broker requires one"
	case strings.Contains(alert, "protocol version"), strings.Contains(alert, "handshake failure"), strings.Contains(alert, "insufficient security"):
		return base + ": no TLS version or cipher suite in common, or the broker requires a client certificate: check the broker's TLS versions and ciphers, and give cert_file= and key_file= if it requires one"
	case strings.Contains(alert, "unrecognized name"):
		return base + ": it serves no certificate for the requested server name: check the host name or server_name="
	}
	return base
}
