package rocketmq

import (
	"context"
	"net/url"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// init registers rocketmq:// with the scheme registry:
//
//	rocketmq://[accessKey:secret@]host:8081[?invisible=30s&max_lease=30m&await=5s&request_timeout=5s&start_timeout=30s&connect_timeout=10s&insecure=true]
//
// host:port is the RocketMQ 5 proxy's gRPC endpoint; user and password are
// the ACL access key and secret (the secret also from password_file or
// password_env); the shared namespace parameter becomes the RocketMQ
// namespace; max_lease is Options.MaxLease (0 turns lease renewal off).
// Open sends one signed Heartbeat within connect_timeout (see New), so an
// unreachable proxy, a failed TLS handshake or refused credentials
// (ports.ErrAuth) fail Open.
//
// TLS: the v5 Go client dials TLS without verifying the proxy's
// certificate (it has no setting for a CA, a client certificate or a
// server name), or plaintext when the process sets
// rocketmq.client.enableSsl=false. So ca_file, cert_file, key_file,
// server_name, WithTLSFiles and a WithTLS that verifies are refused, not
// silently ignored; insecure=true (or adapters.WithInsecureTLS)
// acknowledges that the proxy is not authenticated, and without it Open
// logs a warning saying so.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "rocketmq", TLSScheme: "rocketmq", Open: openURL, // checkTLS judges the TLS settings
		Example: "rocketmq://127.0.0.1:8081 (the proxy's gRPC address)"})
}

func openURL(ctx context.Context, u *url.URL, cfg *adapters.Config, _ bool) (ports.Adapter, error) {
	o := Options{Endpoint: u.Host, Namespace: cfg.Namespace, Logger: cfg.Logger}
	// max_lease=0 turns renewal off, where a zero MaxLease means the default.
	if o.MaxLease = cfg.Params.Duration("max_lease", DefaultMaxLease, 0, 7*24*time.Hour); o.MaxLease == 0 {
		o.MaxLease = -1
	}
	if err := cfg.Params.Bind(&o, "max_lease"); err != nil {
		return nil, err
	}
	if err := checkTLS(cfg, u.Host); err != nil {
		return nil, err
	}
	if cfg.HasCredentials {
		o.AccessKey, o.AccessSecret = cfg.Username, cfg.Password
	}
	return New(ctx, o)
}

// checkTLS refuses the TLS settings the v5 client cannot apply and warns
// when the unverified TLS was not acknowledged.
func checkTLS(cfg *adapters.Config, endpoint string) error {
	if !cfg.CustomTLS() {
		if rmq.EnableSsl {
			cfg.Logger.Warn("sluice: the RocketMQ v5 client dials the proxy with TLS but does not verify its certificate (it takes no CA, client certificate or server name), so the proxy is not authenticated; add insecure=true (or adapters.WithInsecureTLS) to acknowledge it", "endpoint", endpoint)
		}
		return nil
	}
	if !rmq.EnableSsl {
		return &adapters.ParamError{Param: "TLS settings", Reason: "this process set rocketmq.client.enableSsl=false, so the RocketMQ v5 client dials the proxy in plaintext: remove the TLS settings or the variable"}
	}
	t := cfg.TLS() // warns that verification is off
	if !t.InsecureSkipVerify || t.RootCAs != nil || len(t.Certificates) > 0 || t.GetClientCertificate != nil || t.ServerName != "" {
		return &adapters.ParamError{Param: "TLS settings", Reason: "the RocketMQ v5 Go client takes no TLS configuration: it cannot verify the proxy against a CA (ca_file), present a client certificate (cert_file, key_file) or use a server name (server_name); it always dials TLS without verification. Give only insecure=true (or adapters.WithInsecureTLS) to acknowledge that, and terminate verified TLS in front of the proxy if you need it"}
	}
	return nil
}
