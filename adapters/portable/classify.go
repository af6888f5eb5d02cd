package portable

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// ClassifyNet classifies what every network driver's Classify meets alike:
// ports.ErrClosed, ports.ErrAuth, a failed TLS handshake (ports.ErrTLS,
// only when secure: on a plaintext connection these errors mean something
// else), a refused connect (ports.ErrRefused), a timeout
// (ports.ErrTimeout) and a connection closed, reset or failing otherwise
// (ports.ErrUnreachable); the last three are retryable. Any other error
// gets the zero Class. A driver tests its client's own errors too, before
// or after.
func ClassifyNet(err error, secure bool) driver.Class {
	var (
		ne      net.Error
		record  tls.RecordHeaderError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	switch {
	case errors.Is(err, ports.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.Is(err, ports.ErrAuth):
		return driver.Class{Code: ports.ErrAuth}
	case secure && (errors.Is(err, ports.ErrTLS) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host)):
		return driver.Class{Code: ports.ErrTLS}
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.As(err, new(*net.OpError)):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{}
}
