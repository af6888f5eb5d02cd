package mqtt

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/eclipse/paho.golang/autopaho"

	"github.com/sluicemq/sluice/adapters"
)

// CONNACK reason codes that refuse the client's identity (MQTT 5, 3.2.2.2).
const (
	reasonBadUserNameOrPassword = 0x86
	reasonNotAuthorized         = 0x87
	reasonBanned                = 0x8A
	reasonBadAuthMethod         = 0x8C
)

// explainConnect says why one connection attempt failed when the reason is
// TLS or authentication, and whether retrying can mend it (permanent: a
// certificate the client does not trust, a client certificate the broker
// refused, refused credentials). A connection closed during the handshake
// is explained but not permanent: a restarting broker closes too.
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
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
	if secure {
		e := adapters.ExplainTLS(addr, err)
		return e, errors.Is(e, adapters.ErrTLS) && !closed
	}
	if closed || strings.Contains(err.Error(), "malformed") || strings.Contains(err.Error(), "invalid packet") {
		// A TLS listener drops (or answers with a TLS alert) the
		// plaintext CONNECT: the client sees the end or garbage.
		return fmt.Errorf("%w: %s closed the plaintext MQTT connection or answered something that is not MQTT: not a plaintext port? if it is the broker's TLS port (8883), use mqtts://: %v", adapters.ErrTLS, addr, err), false
	}
	return err, false
}
