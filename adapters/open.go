package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// URLOpener opens an adapter for the URLs of one or more schemes.
type URLOpener interface {
	// OpenURL opens the adapter u names. cfg holds the validated shared
	// settings (namespace, credentials, TLS, logger) and the scheme's own
	// query parameters in cfg.Params, of which the opener must consume
	// every one it understands and then return cfg.Params.Err() when it
	// is not nil, so an unknown parameter is an error. u carries no user
	// info and no query: both moved into cfg. OpenURL blocks until the
	// adapter is connected or ctx is done.
	OpenURL(ctx context.Context, u *url.URL, cfg *Config) (ports.Adapter, error)
}

// OpenerFunc adapts a function to URLOpener.
type OpenerFunc func(ctx context.Context, u *url.URL, cfg *Config) (ports.Adapter, error)

// OpenURL calls f.
func (f OpenerFunc) OpenURL(ctx context.Context, u *url.URL, cfg *Config) (ports.Adapter, error) {
	return f(ctx, u, cfg)
}

// PasswordOnly marks the opener of a broker that authenticates with a
// password alone, without a user name (Redis' requirepass): its URLs may
// carry user info with a password and an empty user name
// (scheme://:password@host), and password_file or password_env without a
// user name. Other schemes refuse both.
func PasswordOnly(o URLOpener) URLOpener { return passwordOnly{o} }

type passwordOnly struct{ URLOpener }

// Mux maps URL schemes to the openers of their adapters and opens URLs
// with them. Its zero value is not usable: make one with NewMux. A Mux is
// safe for concurrent use.
//
// Exactly one adapter opened by a Mux is active at a time (the product's
// rule: a service has one adapter, chosen by configuration), unless it is
// opened with NotExclusive. DefaultMux is the process's: adapter packages
// register their schemes on it when they are imported, and the package
// functions Register, Schemes and Open use it. A tool that bridges two
// brokers, or a test that needs a registry of its own, makes another Mux
// and registers the openers it wants on it (DefaultMux.Opener returns the
// registered ones).
type Mux struct {
	mu      sync.RWMutex
	openers map[string]URLOpener
	active  struct {
		sync.Mutex
		url  string
		open bool
	}
}

// NewMux returns a Mux with no scheme registered.
func NewMux() *Mux { return &Mux{openers: map[string]URLOpener{}} }

// DefaultMux is the process's Mux: adapter packages register on it in
// their init functions.
var DefaultMux = NewMux()

// Register makes scheme ("amqp", "pulsar+ssl") open with o. Schemes are
// case-insensitive. It panics if scheme is empty, already registered or o
// is nil, like database/sql.Register: registration is a program's setup.
func (m *Mux) Register(scheme string, o URLOpener) {
	scheme = strings.ToLower(scheme)
	if scheme == "" || o == nil {
		panic("adapters: Register with an empty scheme or a nil opener")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.openers[scheme]; dup {
		panic("adapters: scheme " + scheme + " registered twice")
	}
	m.openers[scheme] = o
}

// Schemes returns the registered schemes, sorted.
func (m *Mux) Schemes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.openers))
	for s := range m.openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Opener returns the opener registered for scheme.
func (m *Mux) Opener(scheme string) (URLOpener, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	o, ok := m.openers[strings.ToLower(scheme)]
	return o, ok
}

// registered lists the registered schemes for an error message.
func (m *Mux) registered() string {
	if s := m.Schemes(); len(s) > 0 {
		return strings.Join(s, ", ")
	}
	return "none"
}

// Register registers scheme on DefaultMux (see Mux.Register).
func Register(scheme string, o URLOpener) { DefaultMux.Register(scheme, o) }

// Schemes returns the schemes registered on DefaultMux, sorted.
func Schemes() []string { return DefaultMux.Schemes() }

// Open opens rawURL with DefaultMux (see Mux.Open).
func Open(ctx context.Context, rawURL string, opts ...Option) (ports.Adapter, error) {
	return DefaultMux.Open(ctx, rawURL, opts...)
}

// Open opens the adapter rawURL names (see the package documentation for
// the schemes and shared parameters), logs its capabilities and fallbacks
// once, and makes it the Mux's one active adapter until it is closed.
//
// Errors: a malformed URL, an unknown scheme, an unknown or malformed
// parameter, or a conflicting option wrap ports.ErrInvalid (and are a
// *URLError naming the URL without credentials); a second Open while an
// adapter is open wraps ErrAlreadyOpen; a failure to connect is returned
// as the adapter reported it, inside a *URLError.
func (m *Mux) Open(ctx context.Context, rawURL string, opts ...Option) (ports.Adapter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, err := m.parse(rawURL)
	if err != nil {
		return nil, err
	}
	shown := Redact(u)
	fail := func(err error) error { return &URLError{URL: shown, Err: err} }

	o, ok := m.Opener(u.Scheme)
	if !ok {
		return nil, fail(fmt.Errorf("%w %q (registered: %s); each adapter registers its schemes when its package is imported: import _ \"github.com/sluicemq/sluice/adapters/<name>\" (or adapters/all for every scheme)", ErrUnknownScheme, u.Scheme, m.registered()))
	}
	_, pwOnly := o.(passwordOnly)
	cfg, err := newConfig(u, opts, pwOnly)
	if err != nil {
		return nil, fail(err)
	}
	release, err := m.claim(shown, cfg.notExclusive)
	if err != nil {
		return nil, fail(err)
	}
	target := *u
	target.User, target.RawQuery, target.ForceQuery = nil, "", false
	logger := cfg.Logger
	cfg.Logger = slog.New(openerHandler{logger.Handler()})
	a, err := o.OpenURL(ctx, &target, cfg)
	cfg.Logger = logger
	if err != nil {
		release()
		return nil, fail(scrub(err, secrets(u, cfg)))
	}
	if a == nil {
		release()
		return nil, fail(errors.New("opener returned no adapter"))
	}
	logOpened(logger, a, shown)
	return &opened{Adapter: a, url: shown, cfg: cfg, secrets: secrets(u, cfg), release: release}, nil
}

// parse parses rawURL without ever putting it in an error (it may hold a
// password).
func (m *Mux) parse(rawURL string) (*url.URL, error) {
	if strings.TrimSpace(rawURL) == "" {
		return nil, &URLError{Err: fmt.Errorf("%w: empty URL (want e.g. mem://, amqp://host:5672/, kafka://host:9092)", ports.ErrInvalid)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &URLError{URL: "(not shown: it may hold credentials)", Err: fmt.Errorf("%w: malformed URL: %v", ports.ErrInvalid, err)}
	}
	if u.Scheme == "" {
		return nil, &URLError{URL: Redact(u), Err: fmt.Errorf("%w: URL has no scheme (want e.g. mem://, amqp://host:5672/, kafka://host:9092)", ports.ErrInvalid)}
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Opaque != "" {
		if _, known := m.Opener(u.Scheme); !known {
			return nil, &URLError{URL: u.Scheme + ":…", Err: fmt.Errorf("%w %q (registered: %s); a URL is scheme://host…", ErrUnknownScheme, u.Scheme, m.registered())}
		}
		return nil, &URLError{URL: u.Scheme + ":…", Err: fmt.Errorf("%w: write %s://… (with two slashes)", ports.ErrInvalid, u.Scheme)}
	}
	return u, nil
}
