package amqp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters"
)

// explainDial says why a connection to RabbitMQ failed when the reason is
// TLS or authentication: a failed handshake on amqps (adapters.ExplainTLS),
// refused credentials (adapters.ErrAuth), or a plaintext client that got
// no AMQP answer, as from a TLS port. Other errors are returned as they
// are.
//
// cause, when not nil, is the first read error of the TLS connection
// under amqp091: a TLS alert there (a refused client certificate) is the
// reason, whatever amqp091 made of the closed connection (even
// ErrCredentials, which it reports for any close during the login).
func explainDial(secure, external bool, addr string, err, cause error) error {
	if err == nil {
		return nil
	}
	if secure && cause != nil {
		if e := adapters.ExplainTLS(addr, cause); errors.Is(e, adapters.ErrTLS) && !isClosed(cause) {
			return e
		}
	}
	switch {
	case errors.Is(err, amqp.ErrCredentials) && external:
		return fmt.Errorf("%w: RabbitMQ refused the SASL EXTERNAL login: it takes the user name from the client certificate (ssl_cert_login_from, the common name by default), and that user must exist and have access to the virtual host: %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrCredentials):
		return fmt.Errorf("%w: RabbitMQ refused the user name and password (or the user has no access from this host): %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrSASL) && external:
		return fmt.Errorf("%w: RabbitMQ does not offer SASL EXTERNAL: enable the rabbitmq_auth_mechanism_ssl plugin and add EXTERNAL to auth_mechanisms: %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrVhost):
		return fmt.Errorf("%w: the user has no access to this virtual host: %v", adapters.ErrAuth, err)
	case secure:
		return adapters.ExplainTLS(addr, err)
	case errors.Is(err, io.EOF) || errors.Is(err, amqp.ErrFrame) || errors.Is(err, amqp.ErrSyntax) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "frame could not be parsed") || strings.Contains(err.Error(), "connection reset"):
		// A TLS listener answers the AMQP header with a TLS alert or
		// closes: the plaintext client sees garbage or the end.
		return fmt.Errorf("%w: %s gave no AMQP answer to a plaintext connection: not a plaintext port? if it is RabbitMQ's TLS port (5671), use amqps://: %v", adapters.ErrTLS, addr, err)
	}
	return err
}

// isClosed reports a connection that merely ended (no TLS alert in it).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset")
}
