package mem

import (
	"bytes"
	"context"

	"github.com/sluicemq/sluice/ports"
)

// PublishForeign stores body on topic of b's default namespace as a
// producer without sluice's envelope would: no header at all, so no
// HeaderID. Tests only: the in-process broker has no other client.
func PublishForeign(ctx context.Context, b *Broker, topic ports.Topic, body []byte) error {
	return b.send(ctx, "", &message{topic: topic, payload: bytes.Clone(body), headers: ports.Headers{}})
}
