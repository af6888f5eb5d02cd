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
	adapters.Register("mqtt", adapters.OpenerFunc(openMQTT))
	adapters.Register("mqtts", adapters.OpenerFunc(openMQTT))
	adapters.Register("mqtt+embedded", adapters.OpenerFunc(openMQTT))
}

func openMQTT(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	if u.Scheme != "mqtts" {
		hint := "mqtts"
		if u.Scheme == "mqtt+embedded" {
			hint = "" // an in-process broker on loopback has no TLS form
		}
		if err := cfg.PlainOnly(hint); err != nil {
			return nil, err
		}
	}
	var o Options
	switch u.Scheme {
	case "mqtt+embedded":
		if u.Host != "" {
			return nil, &adapters.ParamError{Param: "host", Reason: "mqtt+embedded:// starts its own broker and takes no host (write mqtt+embedded:// or mqtt+embedded:///namespace)"}
		}
		o.Embedded = true
	default:
		if u.Host == "" {
			return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs a broker address, e.g. mqtt://127.0.0.1:1883 or mqtts://127.0.0.1:8883"}
		}
		o.URL = u.Scheme + "://" + u.Host
		if u.Scheme == "mqtts" {
			o.TLS = cfg.TLS()
		}
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
