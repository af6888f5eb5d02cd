package mqtt

import (
	"context"
	"net/url"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// mqtt://, mqtts:// and mqtt+embedded:// open the adapter; the URL form and
// its parameters are in docs/adapters/mqtt.md.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "mqtt", TLSScheme: "mqtts", Open: openMQTT,
		Example: "mqtt://127.0.0.1:1883 or mqtts://127.0.0.1:8883"})
	adapters.Register("mqtt+embedded", adapters.OpenerFunc(func(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
		if err := cfg.PlainOnly(""); err != nil { // an in-process broker on loopback has no TLS form
			return nil, err
		}
		if u.Host != "" {
			return nil, &adapters.ParamError{Param: "host", Reason: "mqtt+embedded:// starts its own broker and takes no host (write mqtt+embedded:// or mqtt+embedded:///namespace)"}
		}
		return openMQTT(ctx, u, cfg, false)
	}))
}

func openMQTT(ctx context.Context, u *url.URL, cfg *adapters.Config, secure bool) (ports.Adapter, error) {
	o := Options{Embedded: u.Scheme == "mqtt+embedded"}
	if !o.Embedded {
		o.URL = u.Scheme + "://" + u.Host
	}
	if secure {
		o.TLS = cfg.TLS()
	}
	ns, err := cfg.PathNamespace(u)
	if err != nil {
		return nil, err
	}
	o.Namespace, o.Username, o.Password = ns, cfg.Username, cfg.Password
	if err := cfg.Params.Bind(&o); err != nil {
		return nil, err
	}
	o.Logger = cfg.Logger
	return New(ctx, o)
}
