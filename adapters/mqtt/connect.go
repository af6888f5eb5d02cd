package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// connSpec describes one MQTT connection the adapter keeps up.
type connSpec struct {
	clientID   string
	cleanStart bool
	expiry     uint32 // session expiry interval, seconds
	receiveMax uint16 // 0: the protocol default (65535)
	session    session.SessionManager
	onPublish  func(paho.PublishReceived) (bool, error)
	onUp       func(*paho.Connack)
	report     func(error) // connection events; nil: dropped
	disconnect func() *paho.Disconnect
	// stayDown, when set, is asked when the connection was lost: true
	// keeps it down (the session was taken over; reconnecting would take
	// it back from the newcomer, and the two would take it from each other
	// for ever).
	stayDown func() bool
	// onConnectError, when set, is called when a connection attempt
	// failed; it must not block.
	onConnectError func()
}

// ConnectionError reports an event on one of the adapter's MQTT
// connections on Subscription.Errors: the connection was lost ("lost"), a
// connection attempt failed ("connect"), it came back without its session
// ("reconnect", wrapping ErrSessionLost) or re-subscribing failed
// ("resubscribe"). The adapter keeps reconnecting.
type ConnectionError struct {
	ClientID string
	Op       string
	Err      error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("mqtt: connection %s: %s: %v", e.ClientID, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *ConnectionError) Unwrap() error { return e.Err }

// ErrSessionLost is reported when a connection came back without its
// session (it expired, or the broker lost its state): deliveries the broker
// held for the client are gone from the broker, and the adapter subscribes
// again.
var ErrSessionLost = errors.New("mqtt: reconnected without the previous session")

// errConnectTimeout: no connection within Options.ConnectTimeout.
var errConnectTimeout = errors.New("no connection within the connect timeout")

// reasonSessionTakenOver is the MQTT 5 DISCONNECT reason code the broker
// sends a client whose session another connection with the same client id
// took over.
const reasonSessionTakenOver = 0x8E

// connect starts an autopaho connection manager for cs and waits until the
// first connection is up, or fails: at once for a failure no retry of the
// first connection mends (a refused TCP connection, TLS handshake or
// credentials), after ConnectTimeout, or when ctx is done. The error is a
// *ports.BrokerError with the portable code. The manager lives until its
// Disconnect.
func (c *conn) connect(ctx context.Context, cs connSpec) (*autopaho.ConnectionManager, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var fatal, last atomic.Pointer[error]
	report := func(err error) {
		if cs.report != nil {
			cs.report(&ConnectionError{ClientID: cs.clientID, Op: "lost", Err: err})
		}
	}
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     uint16(c.opts.KeepAlive.Seconds()),
		CleanStartOnInitialConnection: cs.cleanStart,
		SessionExpiryInterval:         cs.expiry,
		ReconnectBackoff:              autopaho.NewConstantBackoff(c.opts.ReconnectBackoff),
		ConnectTimeout:                c.opts.ConnectTimeout,
		ConnectUsername:               c.opts.Username,
		ConnectPassword:               []byte(c.opts.Password),
		TlsCfg:                        c.opts.TLS,
		OnConnectionUp: func(_ *autopaho.ConnectionManager, ca *paho.Connack) {
			if cs.onUp != nil {
				cs.onUp(ca)
			}
		},
		OnConnectionDown: func() bool { return cs.stayDown == nil || !cs.stayDown() },
		OnConnectError: func(err error) {
			err, permanent := explainConnect(c.opts.TLS != nil, u.Host, err)
			last.Store(&err)
			if permanent && fatal.CompareAndSwap(nil, &err) {
				cancel() // ends the first connection's wait; later ones retry
			}
			if cs.onConnectError != nil {
				cs.onConnectError()
			}
			if cs.report != nil {
				cs.report(&ConnectionError{ClientID: cs.clientID, Op: "connect", Err: err})
			}
		},
		DisconnectPacketBuilder: cs.disconnect,
		ClientConfig: paho.ClientConfig{
			ClientID:      cs.clientID,
			Session:       cs.session,
			OnClientError: report,
			OnServerDisconnect: func(d *paho.Disconnect) {
				if cs.stayDown == nil || !cs.stayDown() { // else reported by whoever keeps it down
					report(fmt.Errorf("server sent DISCONNECT, reason code %d", d.ReasonCode))
				}
			},
		},
	}
	if cs.onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){cs.onPublish}
	}
	rm := cs.receiveMax
	cfg.ConnectPacketBuilder = func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
		if cp.Properties == nil {
			cp.Properties = &paho.ConnectProperties{}
		}
		// The MQTT default, stated explicitly: paho otherwise sends 0 once
		// any property is set, and some brokers (mochi) then strip user
		// properties — our headers — from every PUBLISH they forward.
		cp.Properties.RequestProblemInfo = true
		if rm > 0 {
			cp.Properties.ReceiveMaximum = &rm
		}
		return cp, nil
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("mqtt: %s: %w", cs.clientID, err)
	}
	if err := cm.AwaitConnection(actx); err != nil {
		_ = cm.Disconnect(context.Background())
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		cause := errConnectTimeout
		if f := fatal.Load(); f != nil {
			cause = *f
		} else if l := last.Load(); l != nil {
			cause = fmt.Errorf("%w within %v (last attempt: %w)", errConnectTimeout, c.opts.ConnectTimeout, *l)
		}
		err := fmt.Errorf("mqtt: cannot connect %s to %s: %w", cs.clientID, u.Host, cause)
		if !errors.Is(cause, adapters.ErrTLS) && !errors.Is(cause, adapters.ErrAuth) {
			err = fmt.Errorf("%w; check that an MQTT 5 broker listens at that address (host and port), that it is reachable from here, and the credentials", err)
		}
		cl := c.Classify(err)
		return nil, &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: err}
	}
	return cm, nil
}

// CONNACK reason codes that refuse the client's identity (MQTT 5, 3.2.2.2).
const (
	reasonBadUserNameOrPassword = 0x86
	reasonNotAuthorized         = 0x87
	reasonBanned                = 0x8A
	reasonBadAuthMethod         = 0x8C
)

// explainConnect says why one connection attempt failed, and whether a
// retry of the first connection cannot mend it (permanent): a refused TCP
// connection (nothing listens), a certificate the client does not trust,
// a client certificate the broker refused, refused credentials. A
// connection closed during the handshake is explained but not permanent:
// a restarting broker closes too. Only a TLS connection (secure) is
// labelled adapters.ErrTLS.
func explainConnect(secure bool, addr string, err error) (explained error, permanent bool) {
	var ca *autopaho.ConnackError
	if errors.As(err, &ca) {
		switch ca.ReasonCode {
		case reasonBadUserNameOrPassword:
			return fmt.Errorf("%w: the broker refused the user name and password (CONNACK reason 0x86): %v", adapters.ErrAuth, err), true
		case reasonNotAuthorized:
			return fmt.Errorf("%w: the broker does not authorize this client (CONNACK reason 0x87: no or wrong credentials, or an identity — such as the client certificate's — it does not allow): %v", adapters.ErrAuth, err), true
		case reasonBanned, reasonBadAuthMethod:
			return fmt.Errorf("%w: the broker refused the connection (CONNACK reason 0x%02X): %v", adapters.ErrAuth, ca.ReasonCode, err), true
		}
		return err, false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("nothing listens at %s (connection refused): %w", addr, err), true
	}
	text := err.Error() // paho flattens some errors, and reports a packet it cannot read by text only
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(text, "EOF") || strings.Contains(text, "connection reset")
	if secure {
		e := adapters.ExplainTLS(addr, err)
		return e, errors.Is(e, adapters.ErrTLS) && !closed
	}
	if closed || strings.Contains(text, "malformed") || strings.Contains(text, "unexpected packet") {
		// A TLS listener drops (or answers with a TLS alert) the
		// plaintext CONNECT: the client sees the end or garbage.
		return fmt.Errorf("%s closed the plaintext MQTT connection or answered something that is not MQTT: not a plaintext port? if it is the broker's TLS port (8883), use mqtts://: %w", addr, err), false
	}
	return err, false
}
