package kit

import "github.com/sluicemq/sluice/ports"

// HeaderRequeueGroup names the group a requeue copy is for, where the
// copy republished to the topic reaches every group that reads it (a
// Kafka topic): the members of the other groups pass over it, since they
// handled the original already. A transport header, written by
// AddressCopies and removed by ForeignCopy; the portable layer does both
// for every subscription whose requeues are copies.
const HeaderRequeueGroup = "sluice-requeue-group"

// AddressCopies marks msgs, requeue copies (RequeueCopy), for group.
func AddressCopies(msgs []ports.Message, group string) {
	for i := range msgs {
		msgs[i].Headers.Set(HeaderRequeueGroup, group)
	}
}

// ForeignCopy reports whether h are the headers of a requeue copy for a
// group other than group, and removes the mark from them.
func ForeignCopy(h *ports.Headers, group string) bool {
	g, ok := h.Lookup(HeaderRequeueGroup)
	if !ok {
		return false
	}
	h.Del(HeaderRequeueGroup)
	return g != group
}
