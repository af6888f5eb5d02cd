package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/sluicemq/sluice/adapters"
)

// explainConnect says why the first command on a new connection failed
// when the reason is TLS or authentication: a failed handshake on rediss
// (adapters.ExplainTLS), an ACL refusal (WRONGPASS, NOAUTH, NOPERM:
// adapters.ErrAuth), or a plaintext client cut off by a TLS port. Other
// errors are returned as they are.
func explainConnect(secure bool, addr string, err error) error {
	text := err.Error()
	switch {
	case strings.HasPrefix(text, "WRONGPASS"):
		return fmt.Errorf("%w: Redis refused the user name and password (ACL): %v", adapters.ErrAuth, err)
	case strings.HasPrefix(text, "NOAUTH"):
		return fmt.Errorf("%w: Redis requires authentication: give an ACL user and password (rediss://user@host/?password_file=…): %v", adapters.ErrAuth, err)
	case strings.HasPrefix(text, "NOPERM"):
		return fmt.Errorf("%w: the ACL user may not run the commands the adapter needs (streams, sorted sets, scripts, keys under the namespace): %v", adapters.ErrAuth, err)
	case secure && isTimeout(err):
		// A plaintext port waits for the end of an inline command that
		// never comes: the TLS hello gets no answer.
		return fmt.Errorf("%w: %s gave no TLS answer within the dial timeout: is it Redis' plaintext port (use its tls-port, or redis://)? or is it unreachable? %v", adapters.ErrTLS, addr, err)
	case secure:
		return adapters.ExplainTLS(addr, err)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(text, "connection reset") ||
		strings.Contains(text, "can't parse") || strings.Contains(text, "invalid reply"): // a TLS alert read as RESP
		return fmt.Errorf("%w: %s closed the plaintext connection or answered something that is not RESP: not a plaintext port? if it is Redis' TLS port (tls-port), use rediss://: %v", adapters.ErrTLS, addr, err)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
