package adapters

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

const maxInFlight = 100000

// Config is what an URLOpener gets besides the URL: the shared settings,
// validated, and the scheme's own query parameters.
type Config struct {
	// Scheme is the URL's scheme, lower case.
	Scheme string
	// Logger is the caller's logger (WithLogger), or a logger that passes
	// only warnings to slog.Default(). Never nil.
	Logger *slog.Logger
	// Namespace is the tenant/service prefix ("" for the adapter's own
	// default).
	Namespace string
	// Username and Password are the credentials from the URL or
	// WithCredentials; HasCredentials says whether any were given. Openers
	// must never log them.
	Username, Password string
	HasCredentials     bool
	// InFlight and Retry are the subscription defaults Spec applies.
	InFlight int
	Retry    ports.RetryPolicy

	inFlightSet bool // InFlight came from the URL or WithInFlight
	// Params are the scheme's own query parameters.
	Params *Params

	tlsSet       tlsSettings
	host         string
	notExclusive bool
	passwordOnly bool       // the scheme takes a password without a user name (PasswordOnly)
	secrets      *secretSet // every secret value, scrubbed from errors and logs
}

// WarnLogger returns Logger passing on warnings and errors only, for a
// broker client's own logger (which is chatty at Info).
func (c *Config) WarnLogger() *slog.Logger {
	return slog.New(minLevel{h: c.Logger.Handler(), min: slog.LevelWarn})
}

// PlainOnly returns an error when any TLS setting was given (WithTLS,
// WithTLSFiles, WithInsecureTLS, ca_file, cert_file, key_file,
// server_name, insecure), for openers of plaintext schemes: a
// configuration must not silently drop TLS.
func (c *Config) PlainOnly(tlsScheme string) error {
	if !c.tlsSet.given() {
		return nil
	}
	hint := "this scheme has no TLS form"
	if tlsScheme != "" {
		hint = "use " + tlsScheme + "://"
	}
	return &ParamError{Param: c.tlsSet.names(), Reason: fmt.Sprintf("TLS settings given for the plaintext scheme %s:// (%s)", c.Scheme, hint)}
}

// PathNamespace returns the namespace written as u's path
// ("scheme://host/ns"), else Namespace; an error when both were given.
func (c *Config) PathNamespace(u *url.URL) (string, error) {
	ns := strings.Trim(u.Path, "/")
	if ns != "" && c.Namespace != "" {
		return "", &ParamError{Param: paramNamespace, Reason: "given both as the URL path and as the namespace parameter or option"}
	}
	return cmp.Or(ns, c.Namespace), nil
}

// NoCredentials returns an error when credentials were given, for
// adapters that take none.
func (c *Config) NoCredentials() error {
	if c.HasCredentials {
		return &ParamError{Param: "credentials", Reason: fmt.Sprintf("%s:// takes no user name or password", c.Scheme)}
	}
	return nil
}

// Shared query parameter names.
const (
	paramNamespace   = "namespace"
	paramInFlight    = "inflight"
	paramMaxAttempts = "max_attempts"
	paramBackoff     = "backoff"
	paramMaxBackoff  = "max_backoff"
)

// sharedParams are the query parameters every scheme accepts, for the
// message about an unknown one.
var sharedParams = []string{paramNamespace, paramInFlight, paramMaxAttempts, paramBackoff, paramMaxBackoff}

// secretParams are the shared parameters naming where the password is.
var secretParams = []string{paramPasswordFile, paramPasswordEnv}

// tlsParams are the TLS query parameters, accepted by TLS schemes only
// (a plaintext scheme refuses them with PlainOnly).
var tlsParams = []string{paramCAFile, paramCertFile, paramKeyFile, paramServerName, paramInsecure}

// newConfig merges the URL's shared parameters with the options; u's user
// info and query end up in the Config.
func newConfig(u *url.URL, opts []Option, passwordOnly bool) (*Config, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return nil, &ParamError{Param: "Option", Reason: "nil option"}
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, &ParamError{Param: "query", Reason: "malformed query string: " + err.Error()}
	}
	c := &Config{Scheme: u.Scheme, Logger: o.logger, host: u.Hostname(), notExclusive: o.notExclusive, passwordOnly: passwordOnly, secrets: &secretSet{}}
	if c.Logger == nil {
		c.Logger = slog.New(warnOnly{})
	}
	c.Logger = slog.New(scrubHandler{h: c.Logger.Handler(), s: c.secrets})
	p := newParams(u.Scheme, q)
	p.secrets = c.secrets
	c.Params = p

	if u.User != nil {
		if o.credentials {
			return nil, &ParamError{Param: "WithCredentials", Reason: "credentials given both in the URL and with WithCredentials"}
		}
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
		if c.Username == "" && (!passwordOnly || c.Password == "") {
			return nil, &ParamError{Param: "user info", Reason: "the URL has user info without a user name"}
		}
		c.HasCredentials = true
	} else if o.credentials {
		c.Username, c.Password, c.HasCredentials = o.user, o.pass, true
	}
	if err := c.passwordFromSource(p, o); err != nil {
		return nil, err
	}
	c.secrets.add(c.Password)
	if err := c.parseTLS(p, &o); err != nil {
		return nil, err
	}

	if ns, ok := p.take(paramNamespace); ok {
		if o.namespace != nil {
			return nil, &ParamError{Param: paramNamespace, Reason: "given both in the URL and with WithNamespace"}
		}
		c.Namespace = ns
	} else if o.namespace != nil {
		c.Namespace = *o.namespace
	}

	c.InFlight = p.Int(paramInFlight, 0, 1, maxInFlight)
	if o.inFlight != 0 {
		if p.has(paramInFlight) {
			return nil, &ParamError{Param: paramInFlight, Reason: "given both in the URL and with WithInFlight"}
		}
		c.InFlight = o.inFlight
	}
	c.inFlightSet = c.InFlight != 0
	if c.InFlight == 0 {
		c.InFlight = ports.DefaultInFlight
	}

	urlRetry := p.has(paramMaxAttempts) || p.has(paramBackoff) || p.has(paramMaxBackoff)
	c.Retry = ports.RetryPolicy{
		MaxAttempts: p.Int(paramMaxAttempts, 0, -1, 1000),
		Backoff:     p.Duration(paramBackoff, 0, 0, time.Hour),
		MaxBackoff:  p.Duration(paramMaxBackoff, 0, 0, 24*time.Hour),
	}
	if c.Retry.MaxAttempts == 0 && p.has(paramMaxAttempts) {
		p.fail(paramMaxAttempts, "must be -1 (unbounded) or 1..1000")
	}
	if o.retry != nil {
		if urlRetry {
			return nil, &ParamError{Param: "WithRetry", Reason: "retry given both in the URL (max_attempts, backoff, max_backoff) and with WithRetry"}
		}
		c.Retry = *o.retry
	}
	if r := c.Retry; r.Backoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.Backoff {
		p.fail(paramMaxBackoff, fmt.Sprintf("%v is shorter than backoff %v", r.MaxBackoff, r.Backoff))
	}
	if err := p.sharedErr(); err != nil {
		return nil, err
	}
	return c, nil
}

// warnOnly is the default log handler: warnings and errors go to
// slog.Default() (resolved when a record is logged), Info and Debug
// nowhere.
type warnOnly struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (warnOnly) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w warnOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	h := slog.Default().Handler()
	for _, op := range w.ops {
		h = op(h)
	}
	if !h.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handle(ctx, r)
}

func (w warnOnly) with(op func(slog.Handler) slog.Handler) warnOnly {
	return warnOnly{ops: append(append([]func(slog.Handler) slog.Handler(nil), w.ops...), op)}
}

func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return w.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (w warnOnly) WithGroup(name string) slog.Handler {
	return w.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

// minLevel drops records below min.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}

func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(as), min: m.min}
}

func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h: m.h.WithGroup(name), min: m.min}
}
