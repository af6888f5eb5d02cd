package kafka

import (
	"context"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// headerRequeueGroup names the consumer group a requeue copy is for: the
// copy is a record of the topic, which every group reads, and the members
// of the other groups pass over it (they handled the original already).
const headerRequeueGroup = "sluice-requeue-group"

var _ driver.RequeueCopier = (*sub)(nil)

// SendRequeueCopies publishes the portable layer's counted requeue copies
// to the topic, each marked for this subscription's group.
func (s *sub) SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error {
	for i := range msgs {
		msgs[i].Headers[headerRequeueGroup] = s.group
	}
	return s.c.SendBatch(ctx, msgs)
}

// foreignCopy reports a requeue copy made for another group, and removes
// the mark from a copy for this one (it is transport).
func (s *sub) foreignCopy(h ports.Headers) bool {
	g, ok := h[headerRequeueGroup]
	if !ok {
		return false
	}
	delete(h, headerRequeueGroup)
	return g != s.group
}
