package pulsartest

// Decoders of the commands a client sends. Each reads only the fields the
// broker acts on; unknown fields are ignored as protobuf requires. Field
// numbers follow the Pulsar binary protocol's CommandXxx messages.

type connectCmd struct {
	clientVersion   string
	protocolVersion int32
	authMethodName  string
	authData        []byte
	proxyToBroker   string
}

func decodeConnect(b []byte) (c connectCmd, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.clientVersion = f.str()
		case 3:
			c.authData = append([]byte(nil), f.data...)
		case 4:
			c.protocolVersion = f.i32()
		case 5:
			c.authMethodName = f.str()
		case 6:
			c.proxyToBroker = f.str()
		}
		return nil
	})
	return c, err
}

// topicRequest covers LOOKUP, PARTITIONED_METADATA and GET_SCHEMA-like
// requests that name a topic: topic and request id field numbers differ.
type topicRequest struct {
	topic     string
	requestID uint64
}

func decodeTopicRequest(b []byte, topicField, requestField int) (r topicRequest, err error) {
	err = walk(b, func(f field) error {
		switch int(f.num) {
		case topicField:
			r.topic = f.str()
		case requestField:
			r.requestID = f.v
		}
		return nil
	})
	return r, err
}

type producerCmd struct {
	topic        string
	producerID   uint64
	requestID    uint64
	producerName string
	hasSchema    bool
	accessMode   int32
	initialSub   string
}

func decodeProducer(b []byte) (c producerCmd, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.topic = f.str()
		case 2:
			c.producerID = f.v
		case 3:
			c.requestID = f.v
		case 4:
			c.producerName = f.str()
		case 7:
			c.hasSchema = true
		case 10:
			c.accessMode = f.i32()
		case 13:
			c.initialSub = f.str()
		}
		return nil
	})
	return c, err
}

type sendCmd struct {
	producerID        uint64
	sequenceID        uint64
	numMessages       int32
	highestSequenceID uint64
	txn               bool
}

func decodeSend(b []byte) (c sendCmd, err error) {
	c.numMessages = 1
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.producerID = f.v
		case 2:
			c.sequenceID = f.v
		case 3:
			c.numMessages = f.i32()
		case 4, 5:
			c.txn = c.txn || f.v != 0
		case 6:
			c.highestSequenceID = f.v
		}
		return nil
	})
	return c, err
}

type subscribeCmd struct {
	topic           string
	subscription    string
	subType         int32
	consumerID      uint64
	requestID       uint64
	consumerName    string
	durable         bool
	startMessageID  *messageID
	initialEarliest bool
	readCompacted   bool
}

func decodeSubscribe(b []byte) (c subscribeCmd, err error) {
	c.durable = true
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.topic = f.str()
		case 2:
			c.subscription = f.str()
		case 3:
			c.subType = f.i32()
		case 4:
			c.consumerID = f.v
		case 5:
			c.requestID = f.v
		case 6:
			c.consumerName = f.str()
		case 8:
			c.durable = f.v != 0
		case 9:
			id, err := decodeMessageID(f.data)
			if err != nil {
				return err
			}
			c.startMessageID = &id
		case 11:
			c.readCompacted = f.v != 0
		case 13:
			c.initialEarliest = f.v == 1
		}
		return nil
	})
	return c, err
}

type flowCmd struct {
	consumerID uint64
	permits    uint32
}

func decodeFlow(b []byte) (c flowCmd, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.consumerID = f.v
		case 2:
			c.permits = uint32(f.v)
		}
		return nil
	})
	return c, err
}

type ackCmd struct {
	consumerID   uint64
	cumulative   bool
	ids          []messageID
	requestID    uint64
	hasRequestID bool
	txn          bool
}

func decodeAck(b []byte) (c ackCmd, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.consumerID = f.v
		case 2:
			c.cumulative = f.v == 1
		case 3:
			id, err := decodeMessageID(f.data)
			if err != nil {
				return err
			}
			c.ids = append(c.ids, id)
		case 6, 7:
			c.txn = c.txn || f.v != 0
		case 8:
			c.requestID, c.hasRequestID = f.v, true
		}
		return nil
	})
	return c, err
}

type redeliverCmd struct {
	consumerID uint64
	ids        []messageID
}

func decodeRedeliver(b []byte) (c redeliverCmd, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			c.consumerID = f.v
		case 2:
			id, err := decodeMessageID(f.data)
			if err != nil {
				return err
			}
			c.ids = append(c.ids, id)
		}
		return nil
	})
	return c, err
}

// idRequest covers CLOSE_PRODUCER, CLOSE_CONSUMER, UNSUBSCRIBE and
// GET_LAST_MESSAGE_ID: an object id in field 1 and a request id in field 2.
type idRequest struct {
	id        uint64
	requestID uint64
}

func decodeIDRequest(b []byte) (r idRequest, err error) {
	err = walk(b, func(f field) error {
		switch f.num {
		case 1:
			r.id = f.v
		case 2:
			r.requestID = f.v
		}
		return nil
	})
	return r, err
}

// decodeRequestID reads the request id at field num of an unsupported
// request, so it can be answered with an ERROR.
func decodeRequestID(b []byte, num int) (id uint64, ok bool) {
	_ = walk(b, func(f field) error {
		if int(f.num) == num {
			id, ok = f.v, true
		}
		return nil
	})
	return id, ok
}
