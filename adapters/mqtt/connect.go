package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
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
	errs       *kit.Errors
	disconnect func() *paho.Disconnect
	// stayDown, when set, is asked when the connection was lost: true
	// keeps it down (the session was taken over, see
	// subscription.onTakenOver; reconnecting would take it back from the
	// newcomer, and the two would take it from each other for ever).
	stayDown func() bool
	// onConnectError, when set, is called when a connection attempt
	// failed; it must not block.
	onConnectError func()
}

// reasonSessionTakenOver is the MQTT 5 DISCONNECT reason code the broker
// sends a client whose session another connection with the same client id
// took over.
const reasonSessionTakenOver = 0x8E

// connect starts an autopaho connection manager for cs and waits until the
// first connection is up or ctx is done. The manager lives until its
// Disconnect.
func (a *Adapter) connect(ctx context.Context, cs connSpec) (*autopaho.ConnectionManager, error) {
	u, err := url.Parse(a.url)
	if err != nil {
		return nil, err
	}
	secure := a.opts.TLS != nil
	// The first connection is bounded by ConnectTimeout (autopaho would
	// otherwise retry until ctx ends, silently), and ends at once on a
	// failure no retry can mend: a refused TLS handshake or credentials.
	actx, cancel := context.WithTimeout(ctx, a.opts.ConnectTimeout)
	defer cancel()
	var fatal atomic.Pointer[error]
	lastErr := make(chan error, 1)
	keep := func(err error) {
		select {
		case <-lastErr:
		default:
		}
		select {
		case lastErr <- err:
		default:
		}
	}
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     uint16(a.opts.KeepAlive.Seconds()),
		CleanStartOnInitialConnection: cs.cleanStart,
		SessionExpiryInterval:         cs.expiry,
		ReconnectBackoff:              autopaho.NewConstantBackoff(a.opts.ReconnectBackoff),
		ConnectTimeout:                a.opts.ConnectTimeout,
		ConnectUsername:               a.opts.Username,
		ConnectPassword:               []byte(a.opts.Password),
		TlsCfg:                        a.opts.TLS,
		OnConnectionUp: func(_ *autopaho.ConnectionManager, ca *paho.Connack) {
			if cs.onUp != nil {
				cs.onUp(ca)
			}
		},
		OnConnectionDown: func() bool { return cs.stayDown == nil || !cs.stayDown() },
		OnConnectError: func(err error) {
			err, permanent := explainConnect(secure, u.Host, err)
			if permanent && fatal.CompareAndSwap(nil, &err) {
				cancel()
			}
			keep(err)
			if cs.onConnectError != nil {
				cs.onConnectError()
			}
			cs.errs.Report(&ConnectionError{ClientID: cs.clientID, Op: "connect", Err: err})
		},
		DisconnectPacketBuilder: cs.disconnect,
		ClientConfig: paho.ClientConfig{
			ClientID: cs.clientID,
			Session:  cs.session,
			OnClientError: func(err error) {
				cs.errs.Report(&ConnectionError{ClientID: cs.clientID, Op: "lost", Err: err})
			},
			OnServerDisconnect: func(d *paho.Disconnect) {
				if cs.stayDown != nil && cs.stayDown() {
					return // reported by whoever keeps it down
				}
				cs.errs.Report(&ConnectionError{ClientID: cs.clientID, Op: "lost",
					Err: fmt.Errorf("server sent DISCONNECT, reason code %d", d.ReasonCode)})
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
		if f := fatal.Load(); f != nil && ctx.Err() == nil {
			return nil, &ConnectError{Addr: u.Host, ClientID: cs.clientID, Err: *f}
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no connection within the connect timeout %v", a.opts.ConnectTimeout)
		}
		var last error
		select {
		case last = <-lastErr:
		default:
		}
		return nil, &ConnectError{Addr: u.Host, ClientID: cs.clientID, Err: err, Last: last}
	}
	return cm, nil
}

// ConnectError reports that the adapter could not connect to the broker
// at Addr. Err is why it gave up (the connect timeout, or ctx); Last is
// the last attempt's failure, if any.
type ConnectError struct {
	Addr     string
	ClientID string
	Err      error
	Last     error
}

func (e *ConnectError) Error() string {
	msg := fmt.Sprintf("mqtt: cannot connect %s to %s: %v", e.ClientID, e.Addr, e.Err)
	if e.Last != nil {
		msg += fmt.Sprintf(" (last attempt: %v)", e.Last)
	}
	if errors.Is(e.Err, adapters.ErrTLS) || errors.Is(e.Err, adapters.ErrAuth) {
		return msg // the cause is known and says what to do
	}
	return msg + "; check that an MQTT 5 broker listens at that address (host and port), that it is reachable from here, and the credentials"
}

// Unwrap returns the cause and the last attempt's failure.
func (e *ConnectError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}
