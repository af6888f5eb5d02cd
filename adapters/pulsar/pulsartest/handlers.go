package pulsartest

import (
	"errors"
	"fmt"
	"time"
)

// handle carries out one command from the client. A returned error closes
// the connection (a protocol violation); refusals the client can act on are
// answered with ERROR, SEND_ERROR or a failed lookup instead.
func (c *conn) handle(bc base, payload []byte) error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.dead {
		return errors.New("connection already closed")
	}
	if !c.connected {
		if bc.typ != cmdConnect {
			return fmt.Errorf("command %d before CONNECT", bc.typ)
		}
		return c.handleConnect(bc.body)
	}
	if payload != nil && bc.typ != cmdSend {
		return fmt.Errorf("command %d carries a payload", bc.typ)
	}
	switch bc.typ {
	case cmdConnect:
		return errors.New("second CONNECT on a connection")
	case cmdPing:
		c.reply(pongCmd())
	case cmdPong, cmdAuthResponse:
		// Keep-alive answer; credentials are checked at CONNECT only.
	case cmdLookup:
		return c.handleLookup(bc.body)
	case cmdPartitionedMetadata:
		return c.handlePartitionedMetadata(bc.body)
	case cmdProducer:
		return c.handleProducer(bc.body)
	case cmdSend:
		return c.handleSend(bc.body, payload)
	case cmdCloseProducer:
		return c.handleCloseProducer(bc.body)
	case cmdSubscribe:
		return c.handleSubscribe(bc.body)
	case cmdFlow:
		return c.handleFlow(bc.body)
	case cmdAck:
		return c.handleAck(bc.body)
	case cmdRedeliver:
		return c.handleRedeliver(bc.body)
	case cmdCloseConsumer:
		return c.handleCloseConsumer(bc.body)
	case cmdUnsubscribe:
		return c.handleUnsubscribe(bc.body)
	case cmdGetLastMessageID:
		return c.handleGetLastMessageID(bc.body)
	case cmdGetSchema:
		r, err := decodeTopicRequest(bc.body, 2, 1)
		if err != nil {
			return err
		}
		c.reply(getSchemaNotFoundCmd(r.requestID))
	case cmdGetOrCreateSchema:
		r, err := decodeTopicRequest(bc.body, 2, 1)
		if err != nil {
			return err
		}
		c.reply(getOrCreateSchemaCmd(r.requestID))
	default:
		c.unsupported(bc)
	}
	return nil
}

// unsupported answers a command the broker does not implement: requests get
// an ERROR naming the command; other commands are logged and ignored.
func (c *conn) unsupported(bc base) {
	msg := fmt.Sprintf("pulsartest: command type %d is not supported by the test broker", bc.typ)
	if num, ok := requestIDField[bc.typ]; ok {
		if id, ok := decodeRequestID(bc.body, int(num)); ok {
			c.reply(errorCmd(id, errNotAllowed, msg))
			return
		}
	}
	c.b.logf("%s: %s (no request id to answer; ignored)", c.nc.RemoteAddr(), msg)
}

func (c *conn) handleConnect(body []byte) error {
	cmd, err := decodeConnect(body)
	if err != nil {
		return err
	}
	if cmd.proxyToBroker != "" {
		c.reply(errorCmd(0, errNotAllowed, "pulsartest: proxy connections are not supported"))
		return errors.New("CONNECT through a proxy")
	}
	if reason := c.authenticate(cmd); reason != "" {
		// Answer, then close, as Pulsar does. Nothing else is queued
		// before CONNECTED, so the answer is written here (bounded) rather
		// than through the write loop, which shutdown stops.
		_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.nc.Write(appendFrame(nil, errorCmd(0, errAuthentication, "pulsartest: authentication failed: "+reason), nil))
		return errors.New("authentication failed: " + reason)
	}
	version := min(cmd.protocolVersion, maxProtocolVersion)
	c.connected = true
	c.reply(connectedCmd(version, c.b.cfg.maxMessageSize))
	return nil
}

func (c *conn) handleLookup(body []byte) error {
	r, err := decodeTopicRequest(body, 1, 2)
	if err != nil {
		return err
	}
	if _, err := parseTopic(r.topic); err != nil {
		c.reply(lookupFailedCmd(r.requestID, topicErrorCode(err), err.Error()))
		return nil
	}
	c.reply(lookupResponseCmd(r.requestID, c.b.url, c.b.cfg.tls != nil))
	return nil
}

func (c *conn) handlePartitionedMetadata(body []byte) error {
	r, err := decodeTopicRequest(body, 1, 2)
	if err != nil {
		return err
	}
	if _, err := parseTopic(r.topic); err != nil {
		c.reply(partitionedMetadataFailedCmd(r.requestID, topicErrorCode(err), err.Error()))
		return nil
	}
	c.reply(partitionedMetadataCmd(r.requestID))
	return nil
}

func (c *conn) handleProducer(body []byte) error {
	cmd, err := decodeProducer(body)
	if err != nil {
		return err
	}
	name, err := parseTopic(cmd.topic)
	if err != nil {
		c.reply(errorCmd(cmd.requestID, topicErrorCode(err), err.Error()))
		return nil
	}
	if cmd.accessMode != 0 {
		c.reply(errorCmd(cmd.requestID, errNotAllowed, fmt.Sprintf(
			"pulsartest: producer access mode %d is not supported (only Shared)", cmd.accessMode)))
		return nil
	}
	if p, ok := c.producers[cmd.producerID]; ok {
		if p.topic.name != name {
			c.reply(errorCmd(cmd.requestID, errProducerBusy, "pulsartest: producer id already in use on this connection"))
			return nil
		}
		// A retried PRODUCER for a producer that already exists.
		c.reply(producerSuccessCmd(cmd.requestID, p.name, -1, cmd.hasSchema))
		return nil
	}
	t := c.b.topic(name)
	pname := cmd.producerName
	if pname == "" {
		c.b.nextName++
		pname = fmt.Sprintf("pulsartest-%d", c.b.nextName)
	} else if _, busy := t.producers[pname]; busy {
		c.reply(errorCmd(cmd.requestID, errProducerBusy, fmt.Sprintf(
			"pulsartest: producer %q is already connected to %s", pname, name)))
		return nil
	}
	if sub := cmd.initialSub; sub != "" && t.subs[sub] == nil {
		// As a broker with subscription auto-creation: the producer asks
		// for a durable subscription that keeps everything it publishes.
		t.subs[sub] = newSubscription(t, sub, subShared, true, true)
	}
	p := &producer{c: c, id: cmd.producerID, name: pname, topic: t}
	t.producers[pname] = p
	c.producers[cmd.producerID] = p
	c.reply(producerSuccessCmd(cmd.requestID, pname, -1, cmd.hasSchema))
	return nil
}

func (c *conn) handleCloseProducer(body []byte) error {
	r, err := decodeIDRequest(body)
	if err != nil {
		return err
	}
	if p, ok := c.producers[r.id]; ok {
		delete(c.producers, r.id)
		p.topic.removeProducer(p)
	}
	c.reply(successCmd(r.requestID))
	return nil
}

func (c *conn) handleSend(body, payload []byte) error {
	cmd, err := decodeSend(body)
	if err != nil {
		return err
	}
	p, ok := c.producers[cmd.producerID]
	if !ok {
		// As a real broker does: a SEND for an unknown producer closes the
		// connection, and the client re-creates its producer and resends.
		return fmt.Errorf("SEND for unknown producer %d", cmd.producerID)
	}
	if payload == nil {
		return errors.New("SEND without payload")
	}
	if cmd.txn {
		c.reply(sendErrorCmd(cmd.producerID, cmd.sequenceID, errNotAllowed,
			"pulsartest: transactions are not supported"))
		return nil
	}
	data, md, err := parsePayload(payload)
	switch {
	case errors.Is(err, errChecksumMismatch):
		c.reply(sendErrorCmd(cmd.producerID, cmd.sequenceID, errChecksum, err.Error()))
		return nil
	case err != nil:
		return fmt.Errorf("SEND payload: %w", err)
	}
	c.b.counters.Sends++
	fault := c.b.faults.next(SendInfo{
		Topic:       p.topic.name,
		Producer:    p.name,
		SequenceID:  cmd.sequenceID,
		NumMessages: int(md.numMessages),
	})
	if fault.Fail {
		c.b.counters.FailedSends++
		c.reply(sendErrorCmd(cmd.producerID, cmd.sequenceID, errPersistence,
			"pulsartest: send failed by fault injection"))
		return nil
	}
	id := p.topic.append(data, md)
	if fault.Withhold {
		c.b.counters.WithheldReceipts++
		return nil
	}
	var notBefore time.Time
	if fault.Delay > 0 {
		c.b.counters.DelayedReceipts++
		notBefore = time.Now().Add(fault.Delay)
	}
	highest := cmd.highestSequenceID
	if highest < cmd.sequenceID {
		highest = cmd.sequenceID
	}
	receipt := sendReceiptCmd(cmd.producerID, cmd.sequenceID, highest, id)
	c.enqueue(appendFrame(nil, receipt, nil), notBefore)
	return nil
}
