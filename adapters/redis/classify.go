package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// Classify gives go-redis's errors their portable codes, by type and by
// the code of Redis' error reply.
func (c *conn) Classify(err error) driver.Class {
	var (
		ne      net.Error
		opErr   *net.OpError
		record  tls.RecordHeaderError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	secure := c != nil && c.o.TLS != nil
	switch {
	case err == nil:
		return driver.Class{}
	case errors.Is(err, goredis.ErrClosed), errors.Is(err, ports.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case goredis.IsAuthError(err), goredis.IsPermissionError(err), errors.Is(err, adapters.ErrAuth),
		goredis.HasErrorPrefix(err, "WRONGPASS"), goredis.HasErrorPrefix(err, "NOAUTH"):
		return driver.Class{Code: ports.ErrAuth}
	case secure && (errors.Is(err, adapters.ErrTLS) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host)):
		return driver.Class{Code: ports.ErrTLS}
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, goredis.ErrPoolTimeout):
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.As(err, &opErr):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	case goredis.HasErrorPrefix(err, "NOGROUP"):
		// The group vanished (a server restarted without persistence, an
		// expired broadcast group): the next receive creates it again.
		return driver.Class{Code: ports.ErrNotFound, Retryable: true}
	case goredis.IsLoadingError(err), goredis.IsMasterDownError(err), goredis.IsTryAgainError(err),
		goredis.IsReadOnlyError(err), goredis.IsMaxClientsError(err):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed}
	}
	return driver.Class{}
}

// connectError is New's error for a failed first command: classified
// (errors.Is with ports.ErrRefused, ports.ErrAuth, ports.ErrTLS, …) and
// saying what to check.
func (c *conn) connectError(err error) error {
	explained := explainConnect(c.o.TLS != nil, c.o.Addr, err)
	if errors.Is(explained, adapters.ErrTLS) || errors.Is(explained, adapters.ErrAuth) {
		explained = fmt.Errorf("redis: connect to %s: %w", c.o.Addr, explained)
	} else {
		explained = fmt.Errorf("redis: connect to %s: %w (is redis-server running there and reachable? check the address, TLS and the ACL user)", c.o.Addr, explained)
	}
	cl := c.Classify(explained)
	if cl.Code == nil {
		return explained
	}
	return &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: explained}
}

// explainConnect says why the first command on a new connection failed
// when the reason is TLS or authentication: a failed handshake on rediss
// (adapters.ExplainTLS), an ACL refusal (WRONGPASS, NOAUTH, NOPERM:
// adapters.ErrAuth), or a plaintext client cut off by a TLS port. Other
// errors are returned as they are.
func explainConnect(secure bool, addr string, err error) error {
	var ne net.Error
	switch {
	case goredis.HasErrorPrefix(err, "WRONGPASS"):
		return fmt.Errorf("%w: Redis refused the user name and password (ACL): %w", adapters.ErrAuth, err)
	case goredis.HasErrorPrefix(err, "NOAUTH"):
		return fmt.Errorf("%w: Redis requires authentication: give the password (redis://:password@host for requirepass) or an ACL user and password (rediss://user@host/?password_file=…): %w", adapters.ErrAuth, err)
	case goredis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Errorf("%w: the ACL user may not run the commands the adapter needs (streams, sorted sets, scripts, keys under the namespace): %w", adapters.ErrAuth, err)
	case secure && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		// A plaintext port waits for the end of an inline command that
		// never comes: the TLS hello gets no answer.
		return fmt.Errorf("%w: %s gave no TLS answer within the dial timeout: is it Redis' plaintext port (use its tls-port, or redis://)? or is it unreachable? %w", adapters.ErrTLS, addr, err)
	case secure:
		return adapters.ExplainTLS(addr, err)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "can't parse") ||
		strings.Contains(err.Error(), "invalid reply"): // a TLS alert read as RESP
		return fmt.Errorf("%w: %s closed the plaintext connection or answered something that is not RESP: not a plaintext port? if it is Redis' TLS port (tls-port), use rediss://: %w", adapters.ErrTLS, addr, err)
	}
	return err
}

// go-redis logs (a pool that cannot dial, a connection dropped by a hook)
// through one process-wide logger, redis.SetLogger, which writes to stderr
// by default. The first New installs clientLog in its place, once; it
// passes every line, at Warn, to the logger of the adapter made last that
// is still open (slog.Default() when none is).
var (
	clientLogOnce sync.Once
	clientLogTo   atomic.Pointer[slog.Logger]
)

type clientLog struct{}

func (clientLog) Printf(ctx context.Context, format string, v ...any) {
	l := clientLogTo.Load()
	if l == nil {
		l = slog.Default()
	}
	l.Log(ctx, slog.LevelWarn, "redis client: "+strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "adapter", "redis")
}

func routeClientLog(l *slog.Logger) {
	clientLogOnce.Do(func() { goredis.SetLogger(clientLog{}) })
	clientLogTo.Store(l)
}

func unrouteClientLog(l *slog.Logger) { clientLogTo.CompareAndSwap(l, nil) }
