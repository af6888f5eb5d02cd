package mqtt_test

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"github.com/eclipse/paho.golang/paho"

	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// publishRaw publishes payload at QoS 1 with a bare paho client, as a
// device without sluice does: no user property.
func publishRaw(ctx context.Context, brokerURL, topic string, payload []byte) error {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "foreign" + randHex(), CleanStart: true, KeepAlive: 30}); err != nil {
		conn.Close()
		return err
	}
	defer c.Disconnect(&paho.Disconnect{})
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload}); err != nil {
		return fmt.Errorf("raw paho publish to %s: %w", topic, err)
	}
	return nil
}

// PublishForeign implements tck.ForeignProducer with a bare paho client.
// MQTT has no message id that survives a redelivery (the packet id is per
// connection), so a message without the ce-id user property has no
// identity.
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	return ports.IDNone, publishRaw(ctx, h.url, mqtt.PhysicalTopic(h.ns, topic), m.Body)
}

var _ tck.ForeignProducer = (*harness)(nil)
