package mqtt

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Options configure an Adapter. Only URL (or Embedded) is required; every
// other zero field takes the default stated on it.
type Options struct {
	// URL is the broker address, "mqtt://host:port" (or "tcp://"), or
	// "mqtts://host:port" with TLS. Required unless Embedded is set.
	URL string
	// Embedded starts an in-process development broker (package embedded)
	// owned by the adapter; URL must be empty. In memory only: never use it
	// in production.
	Embedded bool
	// Username and Password authenticate the connections (optional).
	Username, Password string
	// TLS configures an mqtts:// URL (required for it): CAs, the client
	// certificate (a broker may take it as the identity), the server name.
	TLS *tls.Config
	// Namespace prefixes every physical topic ("<ns>/<topic>") and client
	// id. Default "sluice". It must not contain '/', '+', '#' or '$'.
	Namespace string
	// Instance is this process's stable identity: a LoadBalance member's
	// MQTT session is named after it (unless SubscriptionSpec.Instance is
	// set), so a process restarted with the same Instance gets back what it
	// had not acknowledged and the group's share parked for it meanwhile.
	// Give each replica its own stable value (a pod name). Two live
	// processes with one Instance: the older reports ErrInstanceShared on
	// Errors and fails Receive. Default: random per Adapter, which strands
	// a stopped member's session until SessionExpiry.
	Instance string
	// SessionExpiry is how long the broker keeps a LoadBalance member's
	// session after it disconnected. Default 1h (whole seconds).
	SessionExpiry time.Duration
	// ReconnectGrace is how long the broker keeps the session of a
	// Broadcast instance without InstanceTTL after its connection was lost
	// (Stop ends it at once). Default 1m.
	ReconnectGrace time.Duration
	// LeaveGroupOnStop unsubscribes a LoadBalance member on Stop, so the
	// broker stops parking group messages in its session. Default false: a
	// stopped member keeps its share (the group stays durable).
	LeaveGroupOnStop bool
	// ReceiveMaximum, when positive, is the Receive Maximum every
	// subscription announces. Default 0: SubscriptionSpec.InFlight. The
	// embedded broker needs 65535 (set with Embedded; see the docs).
	ReceiveMaximum int
	// KeepAlive is the MQTT keep-alive. Default 30s.
	KeepAlive time.Duration
	// ConnectTimeout bounds New's and Subscribe's wait for the first
	// connection (a refused one fails at once, ports.ErrRefused). Default
	// 10s.
	ConnectTimeout time.Duration
	// ReconnectBackoff is the pause before a reconnect attempt. Default
	// 250ms.
	ReconnectBackoff time.Duration
	// Logger receives the capabilities line and connection events.
	// Default slog.Default().
	Logger *slog.Logger
	// Existing adopts MQTT names other programs already use.
	Existing []Existing
}

// Default option values.
const (
	DefaultNamespace        = "sluice"
	DefaultSessionExpiry    = time.Hour
	DefaultReconnectGrace   = time.Minute
	DefaultKeepAlive        = 30 * time.Second
	DefaultConnectTimeout   = 10 * time.Second
	DefaultReconnectBackoff = 250 * time.Millisecond
)

func (o Options) withDefaults() Options {
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.Instance = cmp.Or(o.Instance, randomID())
	o.SessionExpiry = cmp.Or(max(o.SessionExpiry, 0), DefaultSessionExpiry)
	o.ReconnectGrace = cmp.Or(max(o.ReconnectGrace, 0), DefaultReconnectGrace)
	o.KeepAlive = cmp.Or(max(o.KeepAlive, 0), DefaultKeepAlive)
	o.ConnectTimeout = cmp.Or(max(o.ConnectTimeout, 0), DefaultConnectTimeout)
	o.ReconnectBackoff = cmp.Or(max(o.ReconnectBackoff, 0), DefaultReconnectBackoff)
	if o.Embedded && o.ReceiveMaximum == 0 {
		o.ReceiveMaximum = 65535
	}
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if o.Embedded && o.URL != "" {
		return &ports.ValueError{Field: "mqtt.Options.URL", Reason: "must be empty with Embedded"}
	}
	if !o.Embedded {
		u, err := url.Parse(o.URL)
		if err != nil || u.Host == "" {
			return &ports.ValueError{Field: "mqtt.Options.URL", Reason: fmt.Sprintf("%q is not an mqtt://host:port URL", o.URL)}
		}
		switch strings.ToLower(u.Scheme) {
		case "mqtt", "tcp":
			if o.TLS != nil {
				return &ports.ValueError{Field: "mqtt.Options.TLS", Reason: fmt.Sprintf("given with the plaintext URL scheme %q: use mqtts://", u.Scheme)}
			}
		case "mqtts":
			if o.TLS == nil {
				return &ports.ValueError{Field: "mqtt.Options.TLS", Reason: "mqtts:// needs a TLS configuration (at least &tls.Config{ServerName: host} for the system roots)"}
			}
		default:
			return &ports.ValueError{Field: "mqtt.Options.URL", Reason: fmt.Sprintf("scheme %q is not supported (mqtt, tcp, mqtts)", u.Scheme)}
		}
	}
	if o.ReceiveMaximum < 0 || o.ReceiveMaximum > 65535 {
		return &ports.ValueError{Field: "mqtt.Options.ReceiveMaximum", Reason: "must be within 0..65535"}
	}
	if !validName(o.Namespace) {
		return &ports.ValueError{Field: "mqtt.Options.Namespace", Reason: fmt.Sprintf("%q must be non-empty without '/', '+', '#', '$'", o.Namespace)}
	}
	if !validName(o.Instance) {
		return &ports.ValueError{Field: "mqtt.Options.Instance", Reason: fmt.Sprintf("%q must be non-empty without '/', '+', '#', '$'", o.Instance)}
	}
	return validateExisting(o.Namespace, o.Existing)
}

// seconds rounds d up to whole seconds for an MQTT expiry interval.
func seconds(d time.Duration) uint32 {
	s := (d + time.Second - 1) / time.Second
	if s > 0xFFFFFFFE {
		s = 0xFFFFFFFE
	}
	return uint32(s)
}
