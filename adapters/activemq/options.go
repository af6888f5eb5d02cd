package activemq

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Options configure an Adapter; every field but Addr has a default.
type Options struct {
	// Addr is the broker's STOMP connector, "host:port". Required.
	Addr string
	// Login and Passcode are the STOMP credentials (ActiveMQ accepts any
	// without a security plugin).
	Login, Passcode string
	// VirtualHost is the STOMP host header. Default "localhost".
	VirtualHost string `url:"virtual_host"`
	// TLS, when set, connects to a stomp+ssl connector.
	TLS *tls.Config
	// Namespace prefixes every physical destination ("<ns>.<topic>").
	// Default "sluice".
	Namespace string
	// PublishConns is the number of publish connections (ActiveMQ syncs
	// its store per commit: several let commits overlap). Default 4.
	PublishConns int `url:"publish_conns,1..64"`
	// DialTimeout bounds a TCP connect plus the handshake. Default 10s.
	DialTimeout time.Duration `url:"dial_timeout,10ms..1h"`
	// HeartBeat is the interval of the broker's STOMP heart-beats: a
	// connection silent for twice (HeartBeat plus one second) is lost: the
	// broker skips a beat after other frames. That bounds every receipt
	// wait. The client sends none: enable
	// transport.keepAlive=true on the broker's connector (see
	// docs/adapters/activemq.md). Default 10s; at least 1s.
	HeartBeat time.Duration `url:"heartbeat,1s..1h"`
	// ReconnectBackoff and ReconnectMaxBackoff pace the retries of a lost
	// subscription (exponential, jitter). Defaults 100ms and 5s.
	ReconnectBackoff    time.Duration `url:"reconnect_backoff,1ms..1h"`
	ReconnectMaxBackoff time.Duration `url:"reconnect_max_backoff,1ms..1h"`
	// Logger receives the capability line and go-stomp's log lines (at
	// debug level). Default: slog.Default().
	Logger *slog.Logger
	// Existing adopts destinations other programs already use, per
	// logical topic (see Existing). Default: none.
	Existing []Existing

	faults interface{ failing([]ports.Message) bool } // test faults (export_test.go)
}

// heartBeatError is the grace on the broker's heart-beats.
const heartBeatError = time.Second

func (o Options) withDefaults() Options {
	o.VirtualHost, o.Namespace = cmp.Or(o.VirtualHost, "localhost"), cmp.Or(o.Namespace, "sluice")
	o.PublishConns = cmp.Or(max(o.PublishConns, 0), 4)
	o.DialTimeout, o.HeartBeat = cmp.Or(max(o.DialTimeout, 0), 10*time.Second), cmp.Or(max(o.HeartBeat, 0), 10*time.Second)
	o.ReconnectBackoff = cmp.Or(max(o.ReconnectBackoff, 0), 100*time.Millisecond)
	o.ReconnectMaxBackoff = max(cmp.Or(max(o.ReconnectMaxBackoff, 0), 5*time.Second), o.ReconnectBackoff)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if o.Addr == "" {
		return &ports.ValueError{Field: "activemq.Options.Addr", Reason: `is required: the broker's STOMP connector, e.g. "127.0.0.1:61613"`}
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return &ports.ValueError{Field: "activemq.Options.Addr", Reason: fmt.Sprintf("%q is not host:port: %v", o.Addr, err)}
	}
	if err := ports.Topic(o.Namespace).Validate(); err != nil {
		return &ports.ValueError{Field: "activemq.Options.Namespace", Reason: err.Error()}
	}
	if o.HeartBeat < time.Second {
		return &ports.ValueError{Field: "activemq.Options.HeartBeat", Reason: "must be at least 1s"}
	}
	return validateExisting(o.Existing)
}
