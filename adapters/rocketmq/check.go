package rocketmq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// check sends one Heartbeat to the proxy, signed as the v5 client signs
// every request (HMAC-SHA1 of the request time with the access secret) and
// over the transport the client uses (TLS without certificate
// verification, or plaintext when the process set
// rocketmq.client.enableSsl=false), and waits for the answer within
// Options.ConnectTimeout. The client itself starts only on the first Send
// or Subscribe and retries in the background, so without this check an
// unreachable proxy or refused credentials would show only then. The
// failure is a *ports.BrokerError with its portable code; the dial's and
// the handshake's own errors are kept, so that it is classified by type.
func (c *conn) check(ctx context.Context) error {
	var cause atomic.Pointer[error] // the dial's or the handshake's error, which gRPC flattens into text
	var transport grpccreds.TransportCredentials = insecure.NewCredentials()
	if rmq.EnableSsl {
		// The v5 client's own setting: it cannot verify the proxy.
		transport = recording{grpccreds.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}), &cause} //nolint:gosec // matches the client; refused options documented
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			cause.Store(&err)
		}
		return conn, err
	}
	conn, err := grpc.NewClient("passthrough:///"+c.o.Endpoint, grpc.WithTransportCredentials(transport), grpc.WithContextDialer(dial))
	if err != nil {
		return &ports.BrokerError{Op: "connect", Err: fmt.Errorf("%w: rocketmq endpoint %s: %w", ports.ErrInvalid, c.o.Endpoint, err)}
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, c.o.ConnectTimeout)
	defer cancel()
	resp, err := v2.NewMessagingServiceClient(conn).Heartbeat(c.sign(cctx), &v2.HeartbeatRequest{ClientType: v2.ClientType_PRODUCER})
	switch code := grpcstatus.Code(err); {
	case resp.GetStatus().GetCode() == v2.Code_OK:
		return nil
	case err == nil:
		err = &rmq.ErrRpcStatus{Code: int32(resp.GetStatus().GetCode()), Message: resp.GetStatus().GetMessage()}
	case ctx.Err() != nil:
		return ctx.Err()
	case cause.Load() != nil && (code == codes.Unavailable || code == codes.DeadlineExceeded):
		err = *cause.Load()
	}
	return c.connectError(err)
}

// connectError classifies err, the check's failure, and says what to check.
func (c *conn) connectError(err error) error {
	ep := c.o.Endpoint
	class := c.Classify(err)
	switch class.Code {
	case ports.ErrAuth:
		key := "no access key"
		if c.o.AccessKey != "" {
			key = fmt.Sprintf("access key %q", c.o.AccessKey)
		}
		err = fmt.Errorf("rocketmq: the proxy at %s refused the credentials (%s): %w; check the access key and secret (the URL's user and password, password_file/password_env, or Options.AccessKey and AccessSecret) and the ACL", ep, key, err)
	case ports.ErrTimeout:
		err = fmt.Errorf("rocketmq: no answer from the proxy at %s within the connect timeout %v: check that a RocketMQ 5 proxy serves gRPC there and is reachable from here: %w", ep, c.o.ConnectTimeout, err)
	case ports.ErrTLS:
		err = fmt.Errorf("rocketmq: %w", err)
	default:
		err = fmt.Errorf("rocketmq: cannot reach the proxy at %s (TLS: %v): check that a RocketMQ 5 proxy serves gRPC there and is reachable from here: %w", ep, rmq.EnableSsl, err)
	}
	return &ports.BrokerError{Op: "connect", Code: class.Code, Retryable: class.Retryable, Err: err}
}

// Classify gives the v5 client's errors their portable codes: the
// RocketMQ status codes (*rmq.ErrRpcStatus), the gRPC status codes and
// the dial's network errors. A failed send also matches
// ports.ErrUnconfirmed. What the proxy may answer differently on a later
// call (unavailable, timed out, throttled, a server error) is retryable;
// a refused request, credentials or an untyped error of the client's own
// checks is not.
func (c *conn) Classify(err error) driver.Class {
	var st *rmq.ErrRpcStatus
	switch {
	case errors.Is(err, ports.ErrInvalid), errors.Is(err, ports.ErrClosed):
		return driver.Class{}
	case errors.As(err, &st):
		return classifyCode(v2.Code(st.Code), err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case rmq.EnableSsl && errors.Is(err, adapters.ErrTLS):
		return driver.Class{Code: ports.ErrTLS}
	}
	if s, ok := grpcstatus.FromError(err); ok {
		switch s.Code() {
		case codes.Unauthenticated, codes.PermissionDenied:
			return driver.Class{Code: ports.ErrAuth}
		case codes.NotFound:
			return driver.Class{Code: ports.ErrNotFound}
		case codes.DeadlineExceeded:
			return driver.Class{Code: ports.ErrTimeout, Retryable: true}
		case codes.Unavailable:
			return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
		case codes.InvalidArgument, codes.Unimplemented, codes.FailedPrecondition, codes.OutOfRange:
			return driver.Class{Code: unconfirmed(err)}
		}
		return driver.Class{Code: unconfirmed(err), Retryable: true}
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.As(err, &ne):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{Code: unconfirmed(err)} // the client's own checks ("simple consumer is not running")
}

// classifyCode classifies a RocketMQ status code.
func classifyCode(code v2.Code, err error) driver.Class {
	switch code {
	case v2.Code_UNAUTHORIZED, v2.Code_FORBIDDEN:
		return driver.Class{Code: ports.ErrAuth}
	case v2.Code_NOT_FOUND, v2.Code_TOPIC_NOT_FOUND, v2.Code_CONSUMER_GROUP_NOT_FOUND:
		return driver.Class{Code: ports.ErrNotFound}
	case v2.Code_PAYLOAD_TOO_LARGE, v2.Code_MESSAGE_BODY_TOO_LARGE, v2.Code_MESSAGE_PROPERTIES_TOO_LARGE:
		return driver.Class{Code: ports.ErrTooLarge}
	case v2.Code_REQUEST_TIMEOUT, v2.Code_PROXY_TIMEOUT, v2.Code_MASTER_PERSISTENCE_TIMEOUT, v2.Code_SLAVE_PERSISTENCE_TIMEOUT:
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	}
	// 429 and 5xx may pass; another 4xx is a request the proxy refuses.
	return driver.Class{Code: unconfirmed(err), Retryable: code == v2.Code_TOO_MANY_REQUESTS || code >= v2.Code_INTERNAL_ERROR}
}

// unconfirmed is ports.ErrUnconfirmed for a failed send, else nil.
func unconfirmed(err error) error {
	if errors.Is(err, ports.ErrUnconfirmed) {
		return ports.ErrUnconfirmed
	}
	return nil
}

// recording is TLS transport credentials that keep a failed handshake's
// error.
type recording struct {
	grpccreds.TransportCredentials
	cause *atomic.Pointer[error]
}

func (r recording) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, grpccreds.AuthInfo, error) {
	conn, info, err := r.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		explained := adapters.ExplainTLS(authority, err)
		r.cause.Store(&explained)
	}
	return conn, info, err
}

// sign adds the v5 protocol's request headers, as the client's own Sign
// does: the time of the request and its HMAC-SHA1 signature.
func (c *conn) sign(ctx context.Context) context.Context {
	now := time.Now().UTC().Format("20060102T150405Z")
	mac := hmac.New(sha1.New, []byte(c.o.AccessSecret))
	mac.Write([]byte(now))
	return metadata.AppendToOutgoingContext(ctx,
		"x-mq-language", "GO",
		"x-mq-protocol", "v2",
		"x-mq-client-version", "5.0.1-rc1",
		"x-mq-request-id", strconv.FormatInt(time.Now().UnixNano(), 36),
		"x-mq-client-id", "sluice-open-check@"+strconv.Itoa(os.Getpid()),
		"x-mq-namespace", c.o.Namespace,
		"x-mq-date-time", now,
		"authorization", fmt.Sprintf("MQv2-HMAC-SHA1 Credential=%s//Rocketmq, SignedHeaders=x-mq-date-time, Signature=%s", c.o.AccessKey, hex.EncodeToString(mac.Sum(nil))),
	)
}
