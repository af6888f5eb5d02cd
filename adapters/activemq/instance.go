package activemq

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/ports"
)

// instanceClientID is the STOMP client-id of a Broadcast subscription's
// connection, one per instance queue: ActiveMQ allows one connection per
// client id, so the broker itself refuses a second subscription of a
// running instance (InvalidClientIDException, "already connected").
func (s *subscription) instanceClientID() []func(*stomp.Conn) error {
	if s.spec.Mode != ports.Broadcast {
		return nil
	}
	return []func(*stomp.Conn) error{stomp.ConnOpt.Header("client-id", "sluice-instance:"+s.queue)}
}

// instanceRefused turns the broker's refusal of a Broadcast connection's
// client id into a *ports.InstanceSharedError; other errors pass. The
// refusal can arrive as a connection closed in the handshake (ActiveMQ
// closes without waiting for its ERROR frame to go out), as from a port
// that is not plaintext STOMP: when a connection without the client id is
// accepted, the client id was refused.
func (s *subscription) instanceRefused(ctx context.Context, err error) error {
	if err == nil || s.spec.Mode != ports.Broadcast {
		return err
	}
	msg := err.Error()
	refused := strings.Contains(msg, "InvalidClientID") || strings.Contains(msg, "already connected")
	if !refused && closedInHandshake(err) {
		if c, perr := s.d.dial(ctx); perr == nil {
			c.close(true)
			refused = true
			msg = "it closed the connection that carried the client id in the handshake and accepted one without it: " + msg
		}
	}
	if refused {
		return &ports.InstanceSharedError{Instance: s.spec.Instance, Where: fmt.Sprintf(
			"the broker refused a second connection with client id %q for queue %s: %s", "sluice-instance:"+s.queue, s.queue, msg)}
	}
	return err
}
