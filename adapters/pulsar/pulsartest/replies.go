package pulsartest

// Encoders of the commands the broker sends. Every required field of the
// protocol is always written: the client's decoder rejects a command that
// lacks one. Each returns an encoded BaseCommand.

func connectedCmd(protocolVersion, maxMessageSize int32) []byte {
	return baseCommand(cmdConnected, func(e *enc) {
		e.string(1, serverVersion)
		e.int32(2, protocolVersion)
		e.int32(3, maxMessageSize)
	})
}

func pingCmd() []byte { return baseCommand(cmdPing, nil) }

func pongCmd() []byte { return baseCommand(cmdPong, nil) }

func successCmd(requestID uint64) []byte {
	return baseCommand(cmdSuccess, func(e *enc) { e.varint(1, requestID) })
}

func errorCmd(requestID uint64, code serverError, msg string) []byte {
	return baseCommand(cmdError, func(e *enc) {
		e.varint(1, requestID)
		e.int32(2, int32(code))
		e.string(3, msg)
	})
}

func lookupResponseCmd(requestID uint64, url string, tls bool) []byte {
	return baseCommand(cmdLookupResponse, func(e *enc) {
		e.string(1, url)
		if tls {
			e.string(2, url) // brokerServiceUrlTls
		}
		e.int32(3, 1) // Connect: this broker serves the topic
		e.varint(4, requestID)
		e.bool(5, true) // authoritative
	})
}

func lookupFailedCmd(requestID uint64, code serverError, msg string) []byte {
	return baseCommand(cmdLookupResponse, func(e *enc) {
		e.int32(3, 2) // Failed
		e.varint(4, requestID)
		e.int32(6, int32(code))
		e.string(7, msg)
	})
}

func partitionedMetadataCmd(requestID uint64) []byte {
	return baseCommand(cmdPartitionedMetadataRes, func(e *enc) {
		e.varint(1, 0) // partitions: every topic is non-partitioned
		e.varint(2, requestID)
		e.int32(3, 0) // Success
	})
}

func partitionedMetadataFailedCmd(requestID uint64, code serverError, msg string) []byte {
	return baseCommand(cmdPartitionedMetadataRes, func(e *enc) {
		e.varint(2, requestID)
		e.int32(3, 1) // Failed
		e.int32(4, int32(code))
		e.string(5, msg)
	})
}

func producerSuccessCmd(requestID uint64, name string, lastSequenceID int64, withSchema bool) []byte {
	return baseCommand(cmdProducerSuccess, func(e *enc) {
		e.varint(1, requestID)
		e.string(2, name)
		e.int64(3, lastSequenceID)
		if withSchema {
			e.bytes(4, schemaVersion)
		}
		e.varint(5, 0) // topic epoch
		e.bool(6, true)
	})
}

func sendReceiptCmd(producerID, sequenceID, highestSequenceID uint64, id messageID) []byte {
	return baseCommand(cmdSendReceipt, func(e *enc) {
		e.varint(1, producerID)
		e.varint(2, sequenceID)
		e.message(3, func(e *enc) { encodeMessageID(e, id) })
		e.varint(4, highestSequenceID)
	})
}

func sendErrorCmd(producerID, sequenceID uint64, code serverError, msg string) []byte {
	return baseCommand(cmdSendError, func(e *enc) {
		e.varint(1, producerID)
		e.varint(2, sequenceID)
		e.int32(3, int32(code))
		e.string(4, msg)
	})
}

// messageCmd is the command part of a MESSAGE frame; the stored payload
// section follows it in the frame.
func messageCmd(consumerID uint64, id messageID, redeliveryCount uint32, ackSet []int64) []byte {
	return baseCommand(cmdMessage, func(e *enc) {
		e.varint(1, consumerID)
		e.message(2, func(e *enc) { encodeMessageID(e, id) })
		if redeliveryCount > 0 {
			e.varint(3, uint64(redeliveryCount))
		}
		for _, w := range ackSet {
			e.int64(4, w)
		}
	})
}

func ackResponseCmd(consumerID, requestID uint64, code serverError, msg string) []byte {
	return baseCommand(cmdAckResponse, func(e *enc) {
		e.varint(1, consumerID)
		if msg != "" {
			e.int32(4, int32(code))
			e.string(5, msg)
		}
		e.varint(6, requestID)
	})
}

func activeConsumerChangeCmd(consumerID uint64, active bool) []byte {
	return baseCommand(cmdActiveConsumerChange, func(e *enc) {
		e.varint(1, consumerID)
		e.bool(2, active)
	})
}

func closeConsumerCmd(consumerID, requestID uint64) []byte {
	return baseCommand(cmdCloseConsumer, func(e *enc) {
		e.varint(1, consumerID)
		e.varint(2, requestID)
	})
}

func lastMessageIDCmd(requestID uint64, last, markDelete messageID) []byte {
	return baseCommand(cmdGetLastMessageIDRes, func(e *enc) {
		e.message(1, func(e *enc) { encodeMessageID(e, last) })
		e.varint(2, requestID)
		e.message(3, func(e *enc) { encodeMessageID(e, markDelete) })
	})
}

func getSchemaNotFoundCmd(requestID uint64) []byte {
	return baseCommand(cmdGetSchemaResponse, func(e *enc) {
		e.varint(1, requestID)
		e.int32(2, int32(errTopicNotFound))
		e.string(3, "pulsartest: topics carry no schema")
	})
}

func getOrCreateSchemaCmd(requestID uint64) []byte {
	return baseCommand(cmdGetOrCreateSchemaRes, func(e *enc) {
		e.varint(1, requestID)
		e.bytes(4, schemaVersion)
	})
}
