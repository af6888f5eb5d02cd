package mqtt

import (
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
	// Embedded starts an in-process development broker (mochi-mqtt, see
	// package embedded) on a free loopback port, owned by the adapter and
	// stopped by Close. URL must be empty. Its state is in memory only:
	// never use it in production.
	Embedded bool
	// Username and Password authenticate the connections (optional).
	Username, Password string
	// TLS configures the connections to an mqtts:// URL (required for
	// it): the trusted CAs, the client certificate (which a broker may
	// take as the identity, as mosquitto's use_identity_as_username does)
	// and the server name. Default nil: plaintext mqtt://.
	TLS *tls.Config

	// Namespace prefixes every physical topic ("<ns>/<topic>") and client
	// id. Default "sluice". It must not contain '/', '+', '#' or '$'.
	Namespace string
	// Instance is this process's stable identity. A LoadBalance member's
	// MQTT session is named after it (unless SubscriptionSpec.Instance is
	// set): a process restarted with the same Instance resumes the session
	// and gets back what it had not acknowledged, and the share of the
	// group's messages the broker parked for it while it was down. Give
	// each replica its own stable value (a StatefulSet pod name, a host
	// name). Two live processes with the same Instance cannot share a
	// session: the broker gives it to the newer connection, and the older
	// subscription reports ErrInstanceShared on Errors, stops reconnecting
	// and fails Receive. Default: random per Adapter, which strands a
	// stopped member's session until SessionExpiry (see the docs).
	Instance string
	// SessionExpiry is how long the broker keeps a LoadBalance member's
	// session (its subscription, its unacknowledged and queued messages)
	// after the member disconnected. Default 1h. Rounded up to seconds.
	SessionExpiry time.Duration
	// ReconnectGrace is how long the broker keeps the session of a
	// Broadcast instance without SubscriptionSpec.InstanceTTL after its
	// connection was lost, so a reconnect resumes it. Stop removes such a
	// session at once. Default 1m.
	ReconnectGrace time.Duration
	// LeaveGroupOnStop unsubscribes a LoadBalance member on Stop, so the
	// broker stops parking group messages in its session. Unacknowledged
	// deliveries stay in the session for a restart with the same instance.
	// Default false: a stopped member keeps its share of the group (and the
	// group stays durable while all members are down).
	LeaveGroupOnStop bool

	// ReceiveMaximum, when positive, is the Receive Maximum every
	// subscription announces to the broker (the number of unacknowledged
	// QoS 1 messages it may push). Default 0: SubscriptionSpec.InFlight,
	// so broker-side flow control bounds what a stalled subscription holds.
	// The embedded broker needs 65535 (set automatically with Embedded; see
	// docs/adapters/mqtt.md on mochi's flow control).
	ReceiveMaximum int

	// KeepAlive is the MQTT keep-alive. Default 30s.
	KeepAlive time.Duration
	// ConnectTimeout bounds one connection attempt, and New's wait for the
	// first connection: past it New fails with a *ConnectError naming the
	// address. Default 10s.
	ConnectTimeout time.Duration
	// ReconnectBackoff is the pause before a reconnect attempt. Default
	// 250ms (constant).
	ReconnectBackoff time.Duration

	// Logger receives the start-up capabilities line and connection
	// events. Default slog.Default().
	Logger *slog.Logger
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
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Instance == "" {
		o.Instance = randomID()
	}
	if o.SessionExpiry <= 0 {
		o.SessionExpiry = DefaultSessionExpiry
	}
	if o.ReconnectGrace <= 0 {
		o.ReconnectGrace = DefaultReconnectGrace
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ReconnectBackoff <= 0 {
		o.ReconnectBackoff = DefaultReconnectBackoff
	}
	if o.Embedded && o.ReceiveMaximum == 0 {
		o.ReceiveMaximum = 65535
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
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
	return nil
}

// FromURL parses an adapter URL:
//
//	mqtt://[user:password@]host:port[/namespace][?instance=NAME&session_expiry=1h&leave_group_on_stop=true]
//	mqtt+embedded://[/namespace]   (in-process development broker)
//
// Query parameters map onto the Options fields of the same meaning.
func FromURL(raw string) (Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Options{}, &ports.ValueError{Field: "mqtt URL", Reason: err.Error()}
	}
	var o Options
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
		o.URL = u.Scheme + "://" + u.Host
	case "mqtt+embedded":
		o.Embedded = true
	default:
		return Options{}, &ports.ValueError{Field: "mqtt URL", Reason: fmt.Sprintf("scheme %q is not mqtt, tcp or mqtt+embedded", u.Scheme)}
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	o.Namespace = strings.Trim(u.Path, "/")
	q := u.Query()
	o.Instance = q.Get("instance")
	if s := q.Get("session_expiry"); s != "" {
		if o.SessionExpiry, err = time.ParseDuration(s); err != nil {
			return Options{}, &ports.ValueError{Field: "mqtt URL session_expiry", Reason: err.Error()}
		}
	}
	o.LeaveGroupOnStop = q.Get("leave_group_on_stop") == "true"
	return o, nil
}

// seconds rounds d up to whole seconds for an MQTT expiry interval.
func seconds(d time.Duration) uint32 {
	s := (d + time.Second - 1) / time.Second
	if s > 0xFFFFFFFE {
		s = 0xFFFFFFFE
	}
	return uint32(s)
}
