package mqtt

import (
	"cmp"
	"crypto/tls"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Options configure an Adapter. Only URL (or Embedded) is required; a zero
// field takes its default.
type Options struct {
	// URL is "mqtt://host:port" (or "tcp://"), or "mqtts://host:port".
	URL string
	// Embedded starts an in-process, in-memory development broker (never
	// for production); URL must be empty.
	Embedded bool
	// Username and Password authenticate the connections (optional).
	Username, Password string
	// TLS configures an mqtts:// URL (required for it).
	TLS *tls.Config
	// Namespace prefixes every physical topic and client id. Default
	// "sluice".
	Namespace string `default:"sluice"`
	// Instance is this process's stable identity (a pod name), naming its
	// LoadBalance members' sessions: a restart with the same Instance gets
	// back what it had not acknowledged. Two live processes with one
	// Instance: the older reports ports.ErrInstanceShared. Default random,
	// which strands a stopped member's session until SessionExpiry.
	Instance string `url:"instance"`
	// SessionExpiry is how long the broker keeps a LoadBalance member's
	// session after it disconnected. Default 1h.
	SessionExpiry time.Duration `url:"session_expiry,1s..1191360h" default:"1h"`
	// ReconnectGrace is how long a lost Broadcast instance without
	// InstanceTTL keeps its session (Stop ends it). Default 1m.
	ReconnectGrace time.Duration `url:"reconnect_grace,1s..24h" default:"1m"`
	// LeaveGroupOnStop unsubscribes a LoadBalance member on Stop. Default
	// false: a stopped member keeps its share (the group stays durable).
	LeaveGroupOnStop bool `url:"leave_group_on_stop"`
	// DropUnroutable confirms a Send that no subscription matched (PUBACK
	// reason 0x10): the broker dropped it, which Send otherwise reports
	// with ports.ErrNoSubscriber. Dead letters always fail that way.
	DropUnroutable bool `url:"drop_unroutable"`
	// ReceiveMaximum, when positive, is every subscription's Receive
	// Maximum. Default SubscriptionSpec.InFlight.
	ReceiveMaximum int `url:"receive_maximum,1..65535"`
	// KeepAlive is the MQTT keep-alive. Default 30s.
	KeepAlive time.Duration `url:"keep_alive,1s..18h" default:"30s"`
	// ConnectTimeout bounds New's and Subscribe's first connection.
	// Default 10s.
	ConnectTimeout time.Duration `url:"connect_timeout,10ms..1h" default:"10s"`
	// ReconnectBackoff is the pause before a reconnect. Default 250ms.
	ReconnectBackoff time.Duration `default:"250ms"`
	// Logger receives the capabilities line and connection events.
	Logger *slog.Logger
	// Existing adopts MQTT names other programs already use.
	Existing []Existing
}

func (o Options) withDefaults() Options {
	kit.DefaultTags(&o)
	o.Instance = cmp.Or(o.Instance, ports.NewID())
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	bad := kit.Invalid("mqtt.Options.")
	scheme := ""
	if u, err := url.Parse(o.URL); err == nil && u.Host != "" {
		scheme = strings.ToLower(u.Scheme)
	}
	switch {
	case o.Embedded && o.URL != "":
		return bad("URL", "must be empty with Embedded")
	case o.Embedded:
	case scheme != "mqtt" && scheme != "tcp" && scheme != "mqtts":
		return bad("URL", "%q is not an mqtt://, tcp:// or mqtts:// host:port URL", o.URL)
	case scheme == "mqtts" && o.TLS == nil:
		return bad("TLS", "mqtts:// needs a TLS configuration (at least &tls.Config{ServerName: host} for the system roots)")
	case scheme != "mqtts" && o.TLS != nil:
		return bad("TLS", "given with the plaintext URL scheme %s://: use mqtts://", scheme)
	case o.ReceiveMaximum < 0 || o.ReceiveMaximum > 65535:
		return bad("ReceiveMaximum", "must be within 0..65535")
	}
	return cmp.Or(checkName("mqtt.Options.Namespace", o.Namespace, ""), checkName("mqtt.Options.Instance", o.Instance, ""),
		validateExisting(o.Namespace, o.Existing))
}

// seconds rounds d up to whole seconds for an MQTT expiry interval.
func seconds(d time.Duration) uint32 {
	return uint32(min((d+time.Second-1)/time.Second, 0xFFFFFFFE))
}
