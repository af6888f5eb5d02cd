package rocketmq

import (
	"context"
	"net/url"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// init registers rocketmq:// with the scheme registry:
//
//	rocketmq://[accessKey:secret@]host:8081[?invisible=30s&await=5s&request_timeout=5s&start_timeout=30s]
//
// host:port is the RocketMQ 5 proxy's gRPC endpoint; user and password are
// the ACL access key and secret; the shared namespace parameter becomes
// the RocketMQ namespace. The v5 client dials TLS without certificate
// verification (its default) unless rocketmq.client.enableSsl=false is in
// the environment, so WithTLS is refused rather than silently ignored.
func init() { adapters.Register("rocketmq", adapters.OpenerFunc(openURL)) }

func openURL(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	if cfg.CustomTLS() {
		return nil, &adapters.ParamError{Param: "WithTLS", Reason: "the RocketMQ v5 Go client takes no TLS configuration (it dials TLS without verification, or plaintext with rocketmq.client.enableSsl=false)"}
	}
	if u.Host == "" {
		return nil, &adapters.ParamError{Param: "host", Reason: "rocketmq:// needs the proxy's gRPC address, e.g. rocketmq://127.0.0.1:8081"}
	}
	p := cfg.Params
	invisible := p.Duration("invisible", DefaultInvisibleDuration, time.Second, 12*time.Hour)
	await := p.Duration("await", DefaultAwaitDuration, 100*time.Millisecond, time.Minute)
	reqTimeout := p.Duration("request_timeout", DefaultRequestTimeout, 100*time.Millisecond, 5*time.Minute)
	startTimeout := p.Duration("start_timeout", 30*time.Second, time.Second, 10*time.Minute)
	if err := p.Err("invisible", "await", "request_timeout", "start_timeout"); err != nil {
		return nil, err
	}
	opts := []Option{
		WithEndpoint(u.Host),
		WithNamespace(cfg.Namespace),
		WithInvisibleDuration(invisible),
		WithAwaitDuration(await),
		WithRequestTimeout(reqTimeout),
		WithStartTimeout(startTimeout),
		WithLogger(cfg.Logger),
	}
	if cfg.HasCredentials {
		opts = append(opts, WithCredentials(cfg.Username, cfg.Password))
	}
	return New(opts...)
}
