package mqtt

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// mqtt:// opens the MQTT 5 adapter; mqtt+embedded:// runs it on an
// in-process development broker (in memory only, never for production):
//
//	mqtt://[user:password@]host:1883[/namespace][?instance=…&session_expiry=1h&reconnect_grace=1m&leave_group_on_stop=false&receive_maximum=0&keep_alive=30s&connect_timeout=10s]
//	mqtts://[user@]host:8883[/namespace][?password_file=…&ca_file=…&cert_file=…&key_file=…&server_name=…]
//	mqtt+embedded://[/namespace]
//
// The namespace (the path, or the namespace parameter, not both) prefixes
// every physical topic and client id. mqtts:// connects with TLS (the
// system roots, or the shared TLS parameters); a client certificate may be
// the identity. Open connects before it returns: a refused connection
// (ports.ErrRefused), TLS handshake (ports.ErrTLS, mqtts:// only) or
// credentials (ports.ErrAuth) fail it at once, not at the connect timeout.
func init() {
	adapters.Register("mqtt", adapters.OpenerFunc(openMQTT))
	adapters.Register("mqtts", adapters.OpenerFunc(openMQTT))
	adapters.Register("mqtt+embedded", adapters.OpenerFunc(openMQTT))
}

var mqttParams = []string{"instance", "session_expiry", "reconnect_grace", "leave_group_on_stop",
	"receive_maximum", "keep_alive", "connect_timeout"}

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
	if ns := strings.Trim(u.Path, "/"); ns != "" {
		if cfg.Namespace != "" {
			return nil, &adapters.ParamError{Param: "namespace", Reason: "given both as the URL path and as the namespace parameter or option"}
		}
		o.Namespace = ns
	} else {
		o.Namespace = cfg.Namespace
	}
	o.Username, o.Password = cfg.Username, cfg.Password

	p := cfg.Params
	o.Instance = p.String("instance", "")
	o.SessionExpiry = p.Duration("session_expiry", 0, time.Second, 136*365*24*time.Hour)
	o.ReconnectGrace = p.Duration("reconnect_grace", 0, time.Second, 24*time.Hour)
	o.LeaveGroupOnStop = p.Bool("leave_group_on_stop", false)
	o.ReceiveMaximum = p.Int("receive_maximum", 0, 1, 65535)
	o.KeepAlive = p.Duration("keep_alive", 0, time.Second, 18*time.Hour)
	o.ConnectTimeout = p.Duration("connect_timeout", 0, 10*time.Millisecond, time.Hour)
	if err := p.Err(mqttParams...); err != nil {
		return nil, err
	}
	o.Logger = cfg.Logger
	return New(ctx, o)
}
