package rocketmq_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluicemq/sluice/ports"
)

// TestClassify: the client's typed errors get their portable codes.
func TestClassify(t *testing.T) {
	a, _ := peerAdapter(t)
	status := func(c v2.Code) error { return &rmq.ErrRpcStatus{Code: int32(c), Message: c.String()} }
	for _, c := range []struct {
		err       error
		code      error
		retryable bool
	}{
		{status(v2.Code_UNAUTHORIZED), ports.ErrAuth, false},
		{status(v2.Code_FORBIDDEN), ports.ErrAuth, false},
		{status(v2.Code_TOPIC_NOT_FOUND), ports.ErrNotFound, false},
		{status(v2.Code_MESSAGE_BODY_TOO_LARGE), ports.ErrTooLarge, false},
		{status(v2.Code_PROXY_TIMEOUT), ports.ErrTimeout, true},
		{status(v2.Code_TOO_MANY_REQUESTS), nil, true},
		{status(v2.Code_ILLEGAL_TOPIC), nil, false},
		{fmt.Errorf("%w: send: %w", ports.ErrUnconfirmed, status(v2.Code_INTERNAL_SERVER_ERROR)), ports.ErrUnconfirmed, true},
		{grpcstatus.Error(codes.Unavailable, "connection reset"), ports.ErrUnreachable, true},
		{grpcstatus.Error(codes.DeadlineExceeded, "slow"), ports.ErrTimeout, true},
		{grpcstatus.Error(codes.Unauthenticated, "no"), ports.ErrAuth, false},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ports.ErrRefused, true},
		{&ports.SizeError{Size: 5, Limit: 4}, nil, false},
		{errors.New("simple consumer is not running"), nil, false},
	} {
		got := a.Driver().Classify(c.err)
		if got.Code != c.code || got.Retryable != c.retryable {
			t.Errorf("Classify(%v) = %v retryable %v, want %v retryable %v", c.err, got.Code, got.Retryable, c.code, c.retryable)
		}
	}
}
