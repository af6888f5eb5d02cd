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
	clientID       string
	cleanStart     bool
	expiry         uint32 // session expiry interval, seconds
	receiveMax     uint16 // 0: the protocol default (65535)
	session        session.SessionManager
	onPublish      func(paho.PublishReceived) (bool, error)
	onUp           func(*autopaho.ConnectionManager, *paho.Connack)
	report         func(error) // connection events; nil: dropped
	disconnect     func() *paho.Disconnect
	stayDown       func() bool // asked when the connection was lost: true keeps it down
	onConnectError func()      // a connection attempt failed; must not block
}

// connError is a connection event for Errors: "lost", "connect",
// "reconnect" (ErrSessionLost), "resubscribe".
func connError(clientID, op string, err error) error {
	return fmt.Errorf("mqtt: connection %s: %s: %w", clientID, op, err)
}

// ErrSessionLost is reported when a connection came back without its
// session: what the broker held for it is gone.
var ErrSessionLost = errors.New("mqtt: reconnected without the previous session")

// errConnectTimeout: no connection within Options.ConnectTimeout.
var errConnectTimeout = errors.New("no connection within the connect timeout")

const reasonSessionTakenOver = 0x8E // DISCONNECT: another connection took the session

// connect starts autopaho for cs and waits for the first connection: a
// *ports.BrokerError at once when a retry cannot mend it (refused, TLS,
// credentials), else after ConnectTimeout.
func (c *conn) connect(ctx context.Context, cs connSpec) (*autopaho.ConnectionManager, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var fatal, last atomic.Pointer[error]
	if cs.report == nil {
		cs.report = func(error) {}
	}
	report := func(err error) { cs.report(connError(cs.clientID, "lost", err)) }
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
		OnConnectionUp:                cs.onUp,
		OnConnectionDown:              func() bool { return cs.stayDown == nil || !cs.stayDown() },
		OnConnectError: func(err error) {
			err, permanent := explainConnect(c.opts.TLS != nil, u.Host, err)
			last.Store(&err)
			if permanent && fatal.CompareAndSwap(nil, &err) {
				cancel() // ends the first connection's wait; later ones retry
			}
			if cs.onConnectError != nil {
				cs.onConnectError()
			}
			cs.report(connError(cs.clientID, "connect", err))
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
		// Explicit: paho sends 0 once any property is set, and mochi then strips user properties.
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

// explainConnect says why a connection attempt failed and whether a retry
// cannot mend it (refused, TLS, credentials; not a handshake closed, as a
// restarting broker does). Only a TLS connection is labelled ErrTLS.
func explainConnect(secure bool, addr string, err error) (explained error, permanent bool) {
	var ca *autopaho.ConnackError
	if errors.As(err, &ca) {
		switch ca.ReasonCode { // those refusing the client's identity (MQTT 5, 3.2.2.2)
		case 0x86:
			return fmt.Errorf("%w: the broker refused the user name and password (CONNACK reason 0x86): %v", adapters.ErrAuth, err), true
		case 0x87:
			return fmt.Errorf("%w: the broker does not authorize this client (CONNACK reason 0x87: no or wrong credentials, or an identity — such as the client certificate's — it does not allow): %v", adapters.ErrAuth, err), true
		case 0x8A, 0x8C:
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
		return fmt.Errorf("%s closed the plaintext MQTT connection or answered something that is not MQTT: not a plaintext port? if it is the broker's TLS port (8883), use mqtts://: %w", addr, err), false
	}
	return err, false
}
