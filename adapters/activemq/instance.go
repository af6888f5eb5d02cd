package activemq

import (
	"fmt"
	"strings"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/ports"
)

// instanceClientID is the STOMP client-id of a Broadcast subscription's
// connection: one per instance queue, so that the broker itself refuses a
// second connection for a running instance (ActiveMQ allows one
// connection per client id and answers the second CONNECT with an
// InvalidClientIDException, "… already connected …"). A LoadBalance
// subscription's connections carry no client id.
func (s *Subscription) instanceClientID() []func(*stomp.Conn) error {
	if s.spec.Mode != ports.Broadcast {
		return nil
	}
	return []func(*stomp.Conn) error{stomp.ConnOpt.Header("client-id", "sluice-instance:"+s.queue)}
}

// instanceRefused turns the broker's refusal of a Broadcast connection's
// client id into a *ports.InstanceSharedError; other errors pass.
func (s *Subscription) instanceRefused(err error) error {
	if err == nil || s.spec.Mode != ports.Broadcast {
		return err
	}
	if msg := err.Error(); strings.Contains(msg, "InvalidClientID") || strings.Contains(msg, "already connected") {
		return &ports.InstanceSharedError{Instance: s.spec.Instance, Where: fmt.Sprintf(
			"the broker refused a second connection with client id %q for queue %s: %v", "sluice-instance:"+s.queue, s.queue, err)}
	}
	return err
}
