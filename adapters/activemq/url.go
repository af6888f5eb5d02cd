package activemq

import (
	"context"
	"net/url"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// activemq://[login:passcode@]host:61613[?namespace=…&virtual_host=…&publish_conns=…&dial_timeout=…&heartbeat=…&reconnect_backoff=…&reconnect_max_backoff=…]
// and activemq+ssl://… (STOMP over TLS) open this adapter through
// adapters.Open; Open connects before it returns.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "activemq", TLSScheme: "activemq+ssl", Open: openURL})
}

func openURL(ctx context.Context, u *url.URL, cfg *adapters.Config, secure bool) (ports.Adapter, error) {
	if u.Host == "" || u.Port() == "" {
		return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs the broker's STOMP connector as host:port, e.g. " + u.Scheme + "://127.0.0.1:61613"}
	}
	if u.Path != "" && u.Path != "/" {
		return nil, &adapters.ParamError{Param: "path", Reason: u.Scheme + ":// takes no path (the namespace is the namespace parameter)"}
	}
	o := Options{Addr: u.Host, Namespace: cfg.Namespace, Logger: cfg.WarnLogger()}
	if cfg.HasCredentials {
		o.Login, o.Passcode = cfg.Username, cfg.Password
	}
	if secure {
		o.TLS = cfg.TLS()
	}
	if err := cfg.Params.Bind(&o); err != nil {
		return nil, err
	}
	return New(ctx, o)
}
