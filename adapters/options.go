package adapters

import (
	"crypto/tls"
	"log/slog"

	"github.com/sluicemq/sluice/ports"
)

// Option configures Open. Options are validated by Open; an invalid one,
// or one that contradicts the URL, is a *ParamError.
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// options are the raw option values before they are merged with the URL.
type options struct {
	logger       *slog.Logger
	tls          *tls.Config
	tlsFiles     *[3]string // ca, cert, key
	insecure     bool
	user, pass   string
	credentials  bool
	namespace    *string
	inFlight     int
	retry        *ports.RetryPolicy
	notExclusive bool
}

// WithLogger makes Open log the adapter's start-up line (capabilities and
// fallbacks, at Info) to l, and hands l to the adapter where it takes a
// slog logger. Default: only warnings, to slog.Default(). A nil l is an
// error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return &ParamError{Param: "WithLogger", Reason: "logger must not be nil"}
		}
		o.logger = l
		return nil
	})
}

// WithCredentials sets the user name and password, instead of putting them
// in the URL (where they may end up in a shell history or a process list).
// They are never logged. Default: the URL's user info, if any. Giving both
// is an error. An empty user is an error.
func WithCredentials(user, password string) Option {
	return optionFunc(func(o *options) error {
		if user == "" {
			return &ParamError{Param: "WithCredentials", Reason: "user must not be empty"}
		}
		o.user, o.pass, o.credentials = user, password, true
		return nil
	})
}

// WithTLS sets the TLS configuration of a TLS scheme (amqps, mqtts,
// kafka+tls, pulsar+ssl, activemq+ssl, rediss). Default: the system
// roots, TLS 1.2 or later, the URL's host as the server name. The URL's
// TLS parameters and WithTLSFiles are applied on top of (a clone of) c.
// Giving it with a plaintext scheme is an error, so a configuration cannot
// silently drop TLS. A nil c is an error; a c with InsecureSkipVerify is
// accepted, and logged as a warning at Open, as WithInsecureTLS is.
func WithTLS(c *tls.Config) Option {
	return optionFunc(func(o *options) error {
		if c == nil {
			return &ParamError{Param: "WithTLS", Reason: "config must not be nil"}
		}
		o.tls = c
		return nil
	})
}

// WithNamespace sets the prefix that isolates this service's physical
// topics, queues and groups from others on the same broker (a tenant
// prefix). Default: the URL's namespace parameter, else the adapter's own
// default. Giving both is an error; the adapter validates the characters.
func WithNamespace(ns string) Option {
	return optionFunc(func(o *options) error {
		o.namespace = &ns
		return nil
	})
}

// WithInFlight sets the in-flight limit [Spec] fills into subscriptions
// that leave SubscriptionSpec.InFlight zero. Default: the URL's inflight
// parameter, else ports.DefaultInFlight (64). n must be 1..100000.
func WithInFlight(n int) Option {
	return optionFunc(func(o *options) error {
		if n < 1 || n > maxInFlight {
			return &ParamError{Param: "WithInFlight", Reason: "must be within 1..100000"}
		}
		o.inFlight = n
		return nil
	})
}

// WithRetry sets the retry policy [Spec] fills into subscriptions whose
// Retry is the zero value. Default: the URL's max_attempts, backoff and
// max_backoff parameters, else the ports.RetryPolicy defaults. p is
// validated as a SubscriptionSpec's Retry is.
func WithRetry(p ports.RetryPolicy) Option {
	return optionFunc(func(o *options) error {
		if err := (ports.SubscriptionSpec{Topic: "t", Group: "g", Retry: p}).Validate(); err != nil {
			return &ParamError{Param: "WithRetry", Reason: err.Error()}
		}
		o.retry = &p
		return nil
	})
}

// NotExclusive lets this adapter live beside another one in the process:
// Open neither checks for an open adapter nor counts this one. For tests
// and for tools that bridge two brokers; a service has one adapter.
// Default: exclusive.
func NotExclusive() Option {
	return optionFunc(func(o *options) error {
		o.notExclusive = true
		return nil
	})
}
