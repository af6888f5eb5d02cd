package rocketmqtest

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

// WithCredentials turns authentication on: every call must be signed with
// one of the access keys given (repeat the option for several), as a
// RocketMQ 5 proxy with ACL enabled checks. The peer verifies the v5
// protocol's signature: the "authorization" header
//
//	MQv2-HMAC-SHA1 Credential=<accessKey>/…, SignedHeaders=x-mq-date-time, Signature=<hex>
//
// whose signature is HMAC-SHA1 over the x-mq-date-time header, keyed with
// the access key's secret. A call with no signature, an unknown access key
// or a wrong signature fails with the gRPC status UNAUTHENTICATED, whose
// message says which and never quotes the secret or the signature.
// Default: no authentication (the client's unsigned or empty-key requests
// are accepted).
func WithCredentials(accessKey, secret string) Option {
	return func(b *Broker) {
		if b.secrets == nil {
			b.secrets = make(map[string]string)
		}
		b.secrets[accessKey] = secret
	}
}

// AuthFailures is the number of calls refused for their credentials.
func (b *Broker) AuthFailures() int64 { return b.authFailures.Load() }

type authState struct {
	secrets      map[string]string // access key → secret; nil: no authentication
	authFailures atomic.Int64
}

func (b *Broker) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := b.authenticate(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (b *Broker) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := b.authenticate(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// authenticate checks the call's signature when credentials are on.
func (b *Broker) authenticate(ctx context.Context) error {
	if b.secrets == nil {
		return nil
	}
	if reason := b.checkSignature(ctx); reason != "" {
		b.authFailures.Add(1)
		return grpcstatus.Error(codes.Unauthenticated, "rocketmqtest: authentication failed: "+reason)
	}
	return nil
}

func (b *Broker) checkSignature(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	// The v5 client signs a retried call again on the same context, so a
	// header can come more than once; as a proxy does (gRPC's Java
	// Metadata.get), the last value counts.
	auth, date := md.Get("authorization"), md.Get("x-mq-date-time")
	if len(auth) == 0 || len(date) == 0 || date[len(date)-1] == "" {
		return "the request is not signed (no authorization or x-mq-date-time header)"
	}
	method, rest, ok := strings.Cut(auth[len(auth)-1], " ")
	if !ok || method != "MQv2-HMAC-SHA1" {
		return "the authorization header is not MQv2-HMAC-SHA1"
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	accessKey, _, _ := strings.Cut(fields["Credential"], "/")
	if accessKey == "" {
		return "the request names no access key"
	}
	secret, known := b.secrets[accessKey]
	if !known {
		return fmt.Sprintf("access key %q is unknown", accessKey)
	}
	if fields["SignedHeaders"] != "x-mq-date-time" {
		return "the signature does not cover x-mq-date-time"
	}
	got, err := hex.DecodeString(fields["Signature"])
	if err != nil {
		return "the signature is not hexadecimal"
	}
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(date[len(date)-1]))
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Sprintf("the signature of access key %q does not match (wrong secret)", accessKey)
	}
	return ""
}
