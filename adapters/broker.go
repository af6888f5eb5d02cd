package adapters

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/sluicemq/sluice/ports"
)

// Broker is how a network broker's URL schemes open its adapter, for
// RegisterBroker: the checks every such opener makes alike, written once.
type Broker struct {
	// Scheme is the plaintext scheme, TLSScheme its TLS form ("" when it
	// has none). A URL of Scheme with TLS settings is refused
	// (Config.PlainOnly), unless TLSScheme is Scheme: a broker whose one
	// scheme takes TLS settings and judges them in Open.
	Scheme, TLSScheme string
	// Example is a URL with an address ("amqp://127.0.0.1:5672/"): a URL
	// without a host is refused with it. "" when Open checks the host.
	Example string
	// Check, when set, completes "check that …" after a failed Open with
	// what the user should check at host. It is not added when the caller
	// has to fix the configuration (ports.ErrInvalid, ErrAuth, ErrTLS, a
	// plaintext client on a TLS listener) or ctx ended.
	Check func(host string) string
	// PasswordOnly: the broker takes a password without a user name
	// (see PasswordOnly).
	PasswordOnly bool
	// Open opens the adapter u names; secure: u's scheme is TLSScheme.
	Open func(ctx context.Context, u *url.URL, cfg *Config, secure bool) (ports.Adapter, error)
}

// RegisterBroker registers b's schemes on DefaultMux (Mux.RegisterBroker).
func RegisterBroker(b Broker) { DefaultMux.RegisterBroker(b) }

// RegisterBroker registers b's schemes with one opener that makes b's
// checks and then calls b.Open.
func (m *Mux) RegisterBroker(b Broker) {
	var o URLOpener = OpenerFunc(b.openURL)
	if b.PasswordOnly {
		o = PasswordOnly(o)
	}
	m.Register(b.Scheme, o)
	if b.TLSScheme != "" && b.TLSScheme != b.Scheme {
		m.Register(b.TLSScheme, o)
	}
}

func (b Broker) openURL(ctx context.Context, u *url.URL, cfg *Config) (ports.Adapter, error) {
	secure := u.Scheme == b.TLSScheme
	if !secure {
		if err := cfg.PlainOnly(b.TLSScheme); err != nil {
			return nil, err
		}
	}
	if u.Host == "" && b.Example != "" {
		return nil, &ParamError{Param: "host", Reason: u.Scheme + ":// needs a broker address, e.g. " + b.Example}
	}
	a, err := b.Open(ctx, u, cfg, secure)
	switch {
	case err == nil:
		return a, nil
	case b.Check == nil || errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrAuth) || errors.Is(err, ports.ErrTLS) ||
		ctx.Err() != nil || errors.As(err, new(*PlaintextOnTLSError)):
		return nil, err
	}
	return nil, fmt.Errorf("%w; check that %s", err, b.Check(u.Host))
}
