package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// ErrSessionLost is reported when a connection came back without its
// session: what the broker held for it is gone.
var ErrSessionLost = errors.New("mqtt: reconnected without the previous session")

// errConnectTimeout: no connection within Options.ConnectTimeout.
var errConnectTimeout = errors.New("no connection within the connect timeout")

// connError is a connection event for Errors: "lost", "connect",
// "reconnect" (ErrSessionLost), "resubscribe".
func connError(clientID, op string, err error) error {
	return fmt.Errorf("mqtt: connection %s: %s: %w", clientID, op, err)
}

// connect starts autopaho for the sender (s nil) or for subscription s,
// and waits for the first connection: a *ports.BrokerError at once when a
// retry cannot mend it (refused, TLS, credentials), else after
// ConnectTimeout.
func (c *conn) connect(ctx context.Context, clientID string, s *subscription) (*autopaho.ConnectionManager, error) {
	u, err := url.Parse(c.opts.URL)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	report := func(err error) { c.opts.Logger.Warn("sluice mqtt: sender connection", "error", err) }
	stayDown := func() bool { return false } // asked when the connection was lost: true keeps it down
	if s != nil {
		report, stayDown = func(err error) { s.Report(err) }, s.takenOver
	}
	var fatal, last atomic.Pointer[error]
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     uint16(c.opts.KeepAlive.Seconds()),
		CleanStartOnInitialConnection: s == nil,
		ReconnectBackoff:              autopaho.NewConstantBackoff(c.opts.ReconnectBackoff),
		ConnectTimeout:                c.opts.ConnectTimeout,
		ConnectUsername:               c.opts.Username,
		ConnectPassword:               []byte(c.opts.Password),
		TlsCfg:                        c.opts.TLS,
		OnConnectionUp:                c.senderUp,
		OnConnectionDown:              func() bool { return !stayDown() },
		OnConnectError: func(err error) {
			err, permanent := explainConnect(c.opts.TLS != nil, u.Host, err)
			last.Store(&err)
			if permanent && fatal.CompareAndSwap(nil, &err) {
				cancel() // ends the first connection's wait; later ones retry
			}
			if s != nil {
				s.failed.Store(true)
			}
			report(connError(clientID, "connect", err))
		},
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			// Explicit: paho sends 0 once any property is set, and a broker may then leave out reason strings and user properties.
			cp.Properties.RequestProblemInfo = true
			if s != nil && s.receiveMax > 0 {
				cp.Properties.ReceiveMaximum = &s.receiveMax
			}
			return cp, nil
		},
		ClientConfig: paho.ClientConfig{
			ClientID: clientID,
			OnClientError: func(err error) {
				if s == nil || !s.dropping.Load() {
					report(connError(clientID, "lost", fmt.Errorf("%w: %w", ports.ErrUnreachable, err)))
				}
			},
			OnServerDisconnect: func(d *paho.Disconnect) {
				if !stayDown() { // else reported by whoever keeps it down
					report(connError(clientID, "lost", fmt.Errorf("%w: server sent DISCONNECT, reason code %d", ports.ErrUnreachable, d.ReasonCode)))
				}
			},
		},
	}
	if s != nil {
		cfg.SessionExpiryInterval, cfg.Session = s.expiry, ackSession{state.NewInMemory(), s}
		cfg.OnConnectionUp, cfg.DisconnectPacketBuilder = s.onUp, s.disconnect
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){s.onPublish}
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("mqtt: %s: %w", clientID, err)
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
		err := fmt.Errorf("mqtt: cannot connect %s to %s: %w", clientID, u.Host, cause)
		if !errors.Is(cause, ports.ErrTLS) && !errors.Is(cause, ports.ErrAuth) {
			err = fmt.Errorf("%w; check that an MQTT 5 broker listens at that address (host and port), that it is reachable from here, and the credentials", err)
		}
		cl := c.Classify(err)
		return nil, &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: err}
	}
	return cm, nil
}

// connackAuth says how a CONNACK reason code refuses the client's
// identity (MQTT 5, 3.2.2.2).
var connackAuth = map[byte]string{
	0x86: "refused the user name and password",
	0x87: "does not authorize this client: no or wrong credentials, or an identity (such as the client certificate's) it does not allow",
	0x8A: "refused the connection (banned)",
	0x8C: "refused the authentication method",
}

// explainConnect says why a connection attempt failed and whether a retry
// cannot mend it (refused, TLS, credentials; not a handshake closed, as a
// restarting broker does). Only a TLS connection is labelled ErrTLS.
func explainConnect(secure bool, addr string, err error) (explained error, permanent bool) {
	var ca *autopaho.ConnackError
	if errors.As(err, &ca) {
		if why, ok := connackAuth[ca.ReasonCode]; ok {
			return fmt.Errorf("%w: the broker %s (CONNACK reason 0x%02X): %v", ports.ErrAuth, why, ca.ReasonCode, err), true
		}
		return err, false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("nothing listens at %s (connection refused): %w", addr, err), true
	}
	text := err.Error() // paho flattens some errors, and reports a packet it cannot read by text only
	closed := adapters.ClosedEarly(err)
	if secure {
		e := adapters.ExplainTLS(addr, err)
		return e, errors.Is(e, ports.ErrTLS) && !closed
	}
	if closed || strings.Contains(text, "malformed") || strings.Contains(text, "unexpected packet") {
		return adapters.NotPlaintext(addr, "MQTT", "mqtts", err), false
	}
	return err, false
}
