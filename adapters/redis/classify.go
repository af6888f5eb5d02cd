package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Classify gives go-redis's errors their portable codes: by type and by
// the code of Redis' error reply, then portable.ClassifyNet.
func (c *conn) Classify(err error) driver.Class {
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case goredis.IsAuthError(err), goredis.IsPermissionError(err):
		return driver.Class{Code: ports.ErrAuth}
	case errors.Is(err, goredis.ErrPoolTimeout):
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case goredis.IsLoadingError(err), goredis.IsMasterDownError(err), goredis.IsTryAgainError(err), goredis.IsReadOnlyError(err):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	case goredis.HasErrorPrefix(err, "NOGROUP"): // ReceiveBatch creates the group again
		return driver.Class{Code: ports.ErrNotFound, Retryable: true}
	}
	if cl := portable.ClassifyNet(err, c.o.TLS != nil); cl.Code != nil || !errors.Is(err, ports.ErrUnconfirmed) {
		return cl
	}
	return driver.Class{Code: ports.ErrUnconfirmed}
}

// connectError is New's error for a failed first command, classified and
// saying what to check.
func (c *conn) connectError(err error) error {
	var ne net.Error
	addr := c.o.Addr
	switch {
	case goredis.HasErrorPrefix(err, "WRONGPASS"):
		err = fmt.Errorf("%w: Redis refused the user name and password (ACL): %w", adapters.ErrAuth, err)
	case goredis.HasErrorPrefix(err, "NOAUTH"):
		err = fmt.Errorf("%w: Redis requires authentication: give the password (redis://:password@host for requirepass) or an ACL user and password (rediss://user@host/?password_file=…): %w", adapters.ErrAuth, err)
	case goredis.HasErrorPrefix(err, "NOPERM"):
		err = fmt.Errorf("%w: the ACL user may not run the commands the adapter needs (streams, sorted sets, scripts, keys under the namespace): %w", adapters.ErrAuth, err)
	case c.o.TLS != nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		// A plaintext port waits for the end of an inline command that never comes.
		err = fmt.Errorf("%w: %s gave no TLS answer within the dial timeout: is it Redis' plaintext port (use its tls-port, or redis://)? or is it unreachable? %w", adapters.ErrTLS, addr, err)
	case c.o.TLS != nil:
		err = adapters.ExplainTLS(addr, err)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "can't parse") || strings.Contains(err.Error(), "invalid reply"):
		err = fmt.Errorf("%w: %w", adapters.ErrTLS, adapters.NotPlaintext(addr, "RESP", "rediss", err))
	}
	return driver.ConnectError(c, &kit.DialError{Broker: "Redis", Addr: addr, Timeout: c.o.DialTimeout, Err: err})
}

// go-redis logs through one process-wide logger (redis.SetLogger, stderr
// by default): the first New hands it clientLog.
var clientLog = &kit.ClientLog{Name: "redis"}
