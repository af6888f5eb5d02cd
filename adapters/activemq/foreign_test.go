package activemq_test

import (
	"context"
	"fmt"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// sendRaw sends body to dest with a bare go-stomp client, as a program
// without sluice does (no header but the ones go-stomp writes), and waits
// for the broker's receipt.
func sendRaw(addr, dest string, body []byte) error {
	c, err := stomp.Dial("tcp", addr, rawLog)
	if err != nil {
		return err
	}
	defer c.Disconnect()
	if err := c.Send(dest, "", body, stomp.SendOpt.Receipt); err != nil {
		return fmt.Errorf("raw STOMP SEND to %s: %w", dest, err)
	}
	return nil
}

// PublishForeign implements tck.ForeignProducer with a bare STOMP client
// to the topic's virtual topic. ActiveMQ gives every message a JMS
// message id (a STOMP producer cannot choose it), kept on redelivery: the
// broker's identity.
func (h *harness) PublishForeign(_ context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	return ports.IDBroker, sendRaw(h.addr, "/topic/VirtualTopic."+h.ns+"."+string(topic), m.Body)
}

var _ tck.ForeignProducer = (*harness)(nil)
