package pulsar

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/ports"
)

// Defaults of the options.
const (
	DefaultURL          = "pulsar://127.0.0.1:6650"
	DefaultTenant       = "public"
	DefaultNamespace    = "default"
	DefaultSendTimeout  = 30 * time.Second
	DefaultOpTimeout    = 30 * time.Second
	DefaultRequeueTick  = 100 * time.Millisecond
	DefaultErrorsBuffer = 64
)

// Option configures New. Options validate themselves: New fails with an
// error wrapping ports.ErrInvalid naming the bad option.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	url          string
	client       pulsarclient.Client
	tenant       string
	namespace    string
	prefix       string
	sendTimeout  time.Duration
	opTimeout    time.Duration
	requeueTick  time.Duration
	errorsBuffer int
	logger       watermill.LoggerAdapter
	clientLogger pulsarlog.Logger

	maxMessageBytes int                      // WithMaxMessageBytes
	maxMessageSet   bool                     // WithMaxMessageBytes was given
	chunking        bool                     // WithChunking
	existing        map[ports.Topic]existing // WithExisting
	auth            pulsarclient.Authentication
	tls             *tls.Config
}

func defaultConfig() config {
	return config{
		url:          DefaultURL,
		tenant:       DefaultTenant,
		namespace:    DefaultNamespace,
		sendTimeout:  DefaultSendTimeout,
		opTimeout:    DefaultOpTimeout,
		requeueTick:  DefaultRequeueTick,
		errorsBuffer: DefaultErrorsBuffer,
		logger:       watermill.NopLogger{},
		clientLogger: pulsarlog.DefaultNopLogger(),

		maxMessageBytes: MaxMessageBytes,
	}
}

// WithURL sets the service URL of the client the adapter creates, e.g.
// "pulsar://127.0.0.1:6650" or "pulsar+ssl://host:6651". Default
// DefaultURL. Ignored when WithClient is given.
func WithURL(u string) Option {
	return optionFunc(func(c *config) error {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "pulsar" && p.Scheme != "pulsar+ssl") || p.Host == "" {
			return &ports.ValueError{Field: "pulsar.WithURL", Reason: fmt.Sprintf("%q is not a pulsar:// or pulsar+ssl:// URL", u)}
		}
		c.url = u
		return nil
	})
}

// WithClient makes the adapter use client instead of creating one. The
// caller owns client: Close does not close it. Use it to configure
// authentication, TLS or logging, or to inject a test double (the client,
// consumer and producer of pulsar-client-go are interfaces).
func WithClient(client pulsarclient.Client) Option {
	return optionFunc(func(c *config) error {
		if client == nil {
			return &ports.ValueError{Field: "pulsar.WithClient", Reason: "client must not be nil"}
		}
		c.client = client
		return nil
	})
}

// WithNamespace places the physical topics in tenant/namespace, which must
// exist on the cluster. Default "public/default" (present on a standalone
// Pulsar).
func WithNamespace(tenant, namespace string) Option {
	return optionFunc(func(c *config) error {
		if !validName(tenant) || !validName(namespace) {
			return &ports.ValueError{Field: "pulsar.WithNamespace", Reason: fmt.Sprintf("%q/%q: tenant and namespace must be non-empty letters, digits, '.', '-', '_'", tenant, namespace)}
		}
		c.tenant, c.namespace = tenant, namespace
		return nil
	})
}

// WithTopicPrefix prepends prefix to every physical topic name, so that
// several applications (or test runs) share a namespace without sharing
// topics. Default "" (no prefix).
func WithTopicPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if prefix != "" && !validName(prefix) {
			return &ports.ValueError{Field: "pulsar.WithTopicPrefix", Reason: fmt.Sprintf("%q: only letters, digits, '.', '-', '_'", prefix)}
		}
		c.prefix = prefix
		return nil
	})
}

// WithSendTimeout bounds how long the client waits for a publish receipt
// before failing the send (ProducerOptions.SendTimeout). Default 30s. A
// shorter timeout fails sooner; a timed-out send may still have been stored.
func WithSendTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return &ports.ValueError{Field: "pulsar.WithSendTimeout", Reason: "must be positive"}
		}
		c.sendTimeout = d
		return nil
	})
}

// WithOperationTimeout bounds client operations such as subscribing and
// acknowledging (ClientOptions.OperationTimeout) of a client the adapter
// creates. Default 30s. Ignored with WithClient.
func WithOperationTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return &ports.ValueError{Field: "pulsar.WithOperationTimeout", Reason: "must be positive"}
		}
		c.opTimeout = d
		return nil
	})
}

// WithRequeueTick sets the resolution of requeue delays: the client's nack
// tracker checks for due redeliveries every tick/3, so a requeued message
// comes back between Disposition.Delay and Disposition.Delay plus about a
// third of tick — never before. Default 100ms. A smaller tick is more
// precise and wakes the client more often.
func WithRequeueTick(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 3*time.Millisecond {
			return &ports.ValueError{Field: "pulsar.WithRequeueTick", Reason: "must be at least 3ms"}
		}
		c.requeueTick = d
		return nil
	})
}

// WithErrorsBuffer sets the capacity of each Subscription.Errors channel.
// Errors that do not fit are dropped and counted (Subscription.Dropped).
// Default 64.
func WithErrorsBuffer(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return &ports.ValueError{Field: "pulsar.WithErrorsBuffer", Reason: "must be at least 1"}
		}
		c.errorsBuffer = n
		return nil
	})
}

// WithLogger sets the Watermill logger used by the adapter, its publisher
// and the start-up capability line. Default watermill.NopLogger.
func WithLogger(l watermill.LoggerAdapter) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return &ports.ValueError{Field: "pulsar.WithLogger", Reason: "logger must not be nil"}
		}
		c.logger = l
		return nil
	})
}

// validName reports whether s is a usable tenant, namespace or prefix.
func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	})
}

// WithClientLogger sets the logger of a client the adapter creates.
// Whatever it is, error-level entries also reach every live Subscription's
// Errors channel as *ClientError. Default: a logger that discards (the
// client's own default writes to logrus' standard logger). Ignored with
// WithClient.
func WithClientLogger(l pulsarlog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return &ports.ValueError{Field: "pulsar.WithClientLogger", Reason: "logger must not be nil"}
		}
		c.clientLogger = l
		return nil
	})
}

// WithAuthentication sets the authentication of the client the adapter
// creates: pulsarclient.NewAuthenticationToken (or ...TokenFromFile),
// NewAuthenticationTLS, NewAuthenticationBasic, or any other provider of
// pulsar-client-go. Default: none. Ignored with WithClient. Open (the
// pulsar:// opener) builds it from the URL's token, user info or client
// certificate and checks it with a CONNECT handshake; New itself does no
// I/O, so with New a refused credential shows on the first Send or
// Subscribe.
func WithAuthentication(a pulsarclient.Authentication) Option {
	return optionFunc(func(c *config) error {
		if a == nil {
			return &ports.ValueError{Field: "pulsar.WithAuthentication", Reason: "authentication must not be nil"}
		}
		c.auth = a
		return nil
	})
}

// WithToken authenticates the client the adapter creates with a token
// (the "token" method: a JWT the broker's AuthenticationProviderToken
// verifies). Shorthand for WithAuthentication(NewAuthenticationToken(t)).
// The token is never logged.
func WithToken(token string) Option {
	return optionFunc(func(c *config) error {
		if token == "" {
			return &ports.ValueError{Field: "pulsar.WithToken", Reason: "token must not be empty"}
		}
		c.auth = pulsarclient.NewAuthenticationToken(token)
		return nil
	})
}

// WithTLSConfig sets the TLS configuration of the client the adapter
// creates, for a pulsar+ssl:// URL: RootCAs to trust the broker,
// Certificates for a client certificate (mutual TLS, and the identity of
// TLS authentication). A ServerName left empty means each broker
// connection's own host, so that every broker of a cluster is verified
// against its own name. Default: the client's (system roots). Ignored
// with WithClient.
func WithTLSConfig(t *tls.Config) Option {
	return optionFunc(func(c *config) error {
		if t == nil {
			return &ports.ValueError{Field: "pulsar.WithTLSConfig", Reason: "config must not be nil"}
		}
		c.tls = t.Clone()
		return nil
	})
}
