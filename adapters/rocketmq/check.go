package rocketmq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
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
)

// DefaultConnectTimeout bounds Open's signed check call.
const DefaultConnectTimeout = 10 * time.Second

// AuthError reports that the proxy at Endpoint refused the access key or
// its signature. errors.Is(err, adapters.ErrAuth) holds. It never holds
// the secret.
type AuthError struct {
	Endpoint  string
	AccessKey string
	// Message is the proxy's explanation.
	Message string
}

func (e *AuthError) Error() string {
	key := "no access key"
	if e.AccessKey != "" {
		key = fmt.Sprintf("access key %q", e.AccessKey)
	}
	return fmt.Sprintf("rocketmq: the proxy at %s refused the credentials (%s): %s; check the access key and secret (the URL's user and password, password_file/password_env, or WithCredentials) and the ACL", e.Endpoint, key, e.Message)
}

// Is makes errors.Is(err, adapters.ErrAuth) true.
func (e *AuthError) Is(target error) bool { return target == adapters.ErrAuth }

// check sends one Heartbeat to the proxy, signed as the v5 client signs
// every request (HMAC-SHA1 of the request time with the access secret) and
// over the transport the client uses (TLS without certificate
// verification, or plaintext when the process set
// rocketmq.client.enableSsl=false), and waits for the answer within
// timeout. The client itself starts only on the first Send or Subscribe
// and retries in the background, so without this check an unreachable
// proxy or refused credentials would show only then.
func (c *config) check(ctx context.Context, timeout time.Duration) error {
	transport := insecure.NewCredentials()
	if rmq.EnableSsl {
		// The v5 client's own setting: it cannot verify the proxy.
		transport = grpccreds.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // matches the client; refused options documented
	}
	conn, err := grpc.NewClient("passthrough:///"+c.endpoint, grpc.WithTransportCredentials(transport))
	if err != nil {
		return fmt.Errorf("rocketmq: endpoint %s: %w", c.endpoint, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := v2.NewMessagingServiceClient(conn).Heartbeat(c.sign(cctx), &v2.HeartbeatRequest{ClientType: v2.ClientType_PRODUCER})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.checkError(err, timeout)
	}
	switch code := resp.GetStatus().GetCode(); code {
	case v2.Code_OK:
		return nil
	case v2.Code_UNAUTHORIZED, v2.Code_FORBIDDEN:
		return &AuthError{Endpoint: c.endpoint, AccessKey: c.accessKey, Message: resp.GetStatus().GetMessage()}
	default:
		return fmt.Errorf("rocketmq: the proxy at %s refused the check call: %v %s", c.endpoint, code, resp.GetStatus().GetMessage())
	}
}

func (c *config) checkError(err error, timeout time.Duration) error {
	st, _ := grpcstatus.FromError(err)
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return &AuthError{Endpoint: c.endpoint, AccessKey: c.accessKey, Message: st.Message()}
	case codes.DeadlineExceeded:
		return fmt.Errorf("rocketmq: no answer from the proxy at %s within the connect timeout %v: check that a RocketMQ 5 proxy serves gRPC there and is reachable from here", c.endpoint, timeout)
	}
	if rmq.EnableSsl {
		if explained := adapters.ExplainTLS(c.endpoint, err); errors.Is(explained, adapters.ErrTLS) {
			return fmt.Errorf("rocketmq: %w", explained)
		}
	}
	return fmt.Errorf("rocketmq: cannot reach the proxy at %s: %s; check that a RocketMQ 5 proxy serves gRPC there (TLS: %v) and is reachable from here", c.endpoint, st.Message(), rmq.EnableSsl)
}

// sign adds the v5 protocol's request headers, as the client's own Sign
// does: the time of the request and its HMAC-SHA1 signature.
func (c *config) sign(ctx context.Context) context.Context {
	now := time.Now().UTC().Format("20060102T150405Z")
	mac := hmac.New(sha1.New, []byte(c.accessSecret))
	mac.Write([]byte(now))
	return metadata.AppendToOutgoingContext(ctx,
		"x-mq-language", "GO",
		"x-mq-protocol", "v2",
		"x-mq-client-version", "5.0.1-rc1",
		"x-mq-request-id", strconv.FormatInt(time.Now().UnixNano(), 36),
		"x-mq-client-id", "sluice-open-check@"+strconv.Itoa(os.Getpid()),
		"x-mq-namespace", c.namespace,
		"x-mq-date-time", now,
		"authorization", fmt.Sprintf("MQv2-HMAC-SHA1 Credential=%s//Rocketmq, SignedHeaders=x-mq-date-time, Signature=%s", c.accessKey, hex.EncodeToString(mac.Sum(nil))),
	)
}
