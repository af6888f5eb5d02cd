package activemq

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/sluicemq/sluice/adapters"
)

// explainHandshake says why the STOMP handshake failed: refused
// credentials (adapters.ErrAuth: the broker's ERROR frame, whose text is
// all go-stomp gives), a client certificate refused after the TLS
// handshake (adapters.ExplainTLS), or a plaintext client cut off by a
// stomp+ssl connector (in the text only). Other errors pass.
func explainHandshake(secure bool, addr string, err error) error {
	text := err.Error()
	lower := strings.ToLower(text)
	switch {
	case strings.Contains(lower, "password is invalid") || strings.Contains(lower, "user name") ||
		strings.Contains(lower, "securityexception") || strings.Contains(lower, "not authorized"):
		return fmt.Errorf("%w: ActiveMQ refused the login and passcode: %v", adapters.ErrAuth, err)
	case secure:
		return adapters.ExplainTLS(addr, err)
	case closedInHandshake(err) || strings.Contains(text, "invalid command"): // a TLS alert record read as a frame
		return fmt.Errorf("%s closed the plaintext STOMP connection or answered something that is not STOMP: not a plaintext port? if it is a stomp+ssl connector, use activemq+ssl://: %w", addr, err)
	}
	return err
}

// closedInHandshake reports a STOMP handshake that ended with the
// connection closed before any frame was read.
func closedInHandshake(err error) bool {
	text := err.Error()
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(text, "connection reset") || strings.Contains(text, "EOF")
}
