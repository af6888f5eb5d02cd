package pulsartest

import (
	"fmt"
	"math"
)

// Consumer-side command handlers. Each runs under the broker lock.

func (c *conn) handleSubscribe(body []byte) error {
	cmd, err := decodeSubscribe(body)
	if err != nil {
		return err
	}
	refuse := func(code serverError, format string, args ...any) error {
		c.reply(errorCmd(cmd.requestID, code, "pulsartest: "+fmt.Sprintf(format, args...)))
		return nil
	}
	name, err := parseTopic(cmd.topic)
	if err != nil {
		c.reply(errorCmd(cmd.requestID, topicErrorCode(err), err.Error()))
		return nil
	}
	if _, ok := c.consumers[cmd.consumerID]; ok {
		// A retried SUBSCRIBE for a consumer that already exists.
		c.reply(successCmd(cmd.requestID))
		return nil
	}
	switch {
	case cmd.subType == subKeyShared:
		return refuse(errNotAllowed, "Key_Shared subscriptions are not supported by the test broker")
	case cmd.subType != subExclusive && cmd.subType != subShared && cmd.subType != subFailover:
		return refuse(errNotAllowed, "unknown subscription type %d", cmd.subType)
	case cmd.subscription == "":
		return refuse(errNotAllowed, "empty subscription name")
	case cmd.readCompacted:
		return refuse(errNotAllowed, "compacted reads are not supported by the test broker")
	}
	t := c.b.topic(name)
	s := t.subs[cmd.subscription]
	if s == nil {
		earliest := cmd.initialEarliest
		if start := cmd.startMessageID; !cmd.durable && start != nil {
			switch {
			case start.ledger == math.MaxUint64: // earliest: ledger -1
				earliest = true
			case start.ledger == math.MaxInt64: // latest
				earliest = false
			default:
				return refuse(errNotAllowed, "non-durable subscriptions can start only at the earliest or latest message")
			}
		}
		s = newSubscription(t, cmd.subscription, cmd.subType, cmd.durable, earliest)
		t.subs[cmd.subscription] = s
	} else if len(s.consumers) > 0 {
		if s.kind != cmd.subType {
			return refuse(errConsumerBusy, "subscription %q is of a different type", cmd.subscription)
		}
		if s.kind == subExclusive {
			return refuse(errConsumerBusy, "exclusive consumer is already connected to %q", cmd.subscription)
		}
	} else {
		s.kind = cmd.subType
	}
	cs := &consumer{c: c, id: cmd.consumerID, name: cmd.consumerName, sub: s, pending: map[uint64]struct{}{}}
	s.consumers = append(s.consumers, cs)
	c.consumers[cmd.consumerID] = cs
	c.reply(successCmd(cmd.requestID))
	if s.kind == subFailover {
		s.notifyActive()
	}
	s.dispatch()
	return nil
}

func (c *conn) handleFlow(body []byte) error {
	cmd, err := decodeFlow(body)
	if err != nil {
		return err
	}
	if cs, ok := c.consumers[cmd.consumerID]; ok {
		cs.permits += int64(cmd.permits)
		cs.sub.dispatch()
	}
	return nil
}

func (c *conn) handleAck(body []byte) error {
	cmd, err := decodeAck(body)
	if err != nil {
		return err
	}
	answer := func(code serverError, msg string) {
		if cmd.hasRequestID {
			c.reply(ackResponseCmd(cmd.consumerID, cmd.requestID, code, msg))
		} else if msg != "" {
			c.b.logf("%s: ACK refused: %s", c.nc.RemoteAddr(), msg)
		}
	}
	cs, ok := c.consumers[cmd.consumerID]
	switch {
	case !ok:
		answer(errConsumerNotFound, fmt.Sprintf("pulsartest: consumer %d not found", cmd.consumerID))
		return nil
	case cmd.txn:
		answer(errNotAllowed, "pulsartest: transactions are not supported")
		return nil
	case cmd.cumulative && cs.sub.kind == subShared:
		answer(errNotAllowed, "pulsartest: cumulative acknowledgement is not allowed on a Shared subscription")
		return nil
	}
	s := cs.sub
	for _, id := range cmd.ids {
		if id.ledger != s.t.ledger || id.entry >= uint64(len(s.t.entries)) {
			continue // not a message of this topic: ignored, as Pulsar does
		}
		partial := len(id.ackSet) > 0
		switch {
		case cmd.cumulative && partial && !c.b.cfg.batchIndexAck:
			s.ackCumulative(id.entry, nil, false) // everything before the batch
		case cmd.cumulative:
			s.ackCumulative(id.entry, id.ackSet, true)
		case partial && c.b.cfg.batchIndexAck:
			s.ackIndexes(id.entry, id.ackSet)
		case partial:
			// Batch-index acks disabled: a partial ack changes nothing.
		default:
			s.ackEntry(id.entry)
		}
	}
	answer(0, "")
	return nil
}

func (c *conn) handleRedeliver(body []byte) error {
	cmd, err := decodeRedeliver(body)
	if err != nil {
		return err
	}
	cs, ok := c.consumers[cmd.consumerID]
	if !ok {
		return nil
	}
	ids := make([]uint64, 0, len(cmd.ids))
	for _, id := range cmd.ids {
		if id.ledger == cs.sub.t.ledger {
			ids = append(ids, id.entry)
		}
	}
	if len(cmd.ids) > 0 && len(ids) == 0 {
		return nil // only ids of other topics
	}
	cs.sub.redeliver(cs, ids)
	return nil
}

func (c *conn) handleCloseConsumer(body []byte) error {
	r, err := decodeIDRequest(body)
	if err != nil {
		return err
	}
	if cs, ok := c.consumers[r.id]; ok {
		delete(c.consumers, r.id)
		cs.sub.removeConsumer(cs)
	}
	c.reply(successCmd(r.requestID))
	return nil
}

func (c *conn) handleUnsubscribe(body []byte) error {
	r, err := decodeIDRequest(body)
	if err != nil {
		return err
	}
	cs, ok := c.consumers[r.id]
	if !ok {
		c.reply(errorCmd(r.requestID, errConsumerNotFound, fmt.Sprintf("pulsartest: consumer %d not found", r.id)))
		return nil
	}
	s := cs.sub
	if len(s.consumers) > 1 {
		c.reply(errorCmd(r.requestID, errConsumerBusy,
			fmt.Sprintf("pulsartest: subscription %q has other consumers connected", s.name)))
		return nil
	}
	delete(c.consumers, r.id)
	s.consumers = nil
	s.remove()
	c.reply(successCmd(r.requestID))
	return nil
}

func (c *conn) handleGetLastMessageID(body []byte) error {
	r, err := decodeIDRequest(body)
	if err != nil {
		return err
	}
	cs, ok := c.consumers[r.id]
	if !ok {
		c.reply(errorCmd(r.requestID, errConsumerNotFound, fmt.Sprintf("pulsartest: consumer %d not found", r.id)))
		return nil
	}
	t := cs.sub.t
	last := messageID{ledger: t.ledger, entry: math.MaxUint64, partition: -1, batchIndex: -1} // entry -1: empty
	if n := len(t.entries); n > 0 {
		last.entry = uint64(n - 1)
		if md := t.entries[n-1].md; md.batched {
			last.batchIndex = md.numMessages - 1
		}
	}
	mark := messageID{ledger: t.ledger, entry: uint64(cs.sub.markDelete), partition: -1, batchIndex: -1}
	c.reply(lastMessageIDCmd(r.requestID, last, mark))
	return nil
}
