package pulsartest

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// cmdType is the type of a BaseCommand (its field 1). In BaseCommand the
// nested command of each type sits in the field whose number equals the type,
// which is what baseCommand and decodeBase rely on.
type cmdType int32

// Command types used by the broker.
const (
	cmdConnect                cmdType = 2
	cmdConnected              cmdType = 3
	cmdSubscribe              cmdType = 4
	cmdProducer               cmdType = 5
	cmdSend                   cmdType = 6
	cmdSendReceipt            cmdType = 7
	cmdSendError              cmdType = 8
	cmdMessage                cmdType = 9
	cmdAck                    cmdType = 10
	cmdFlow                   cmdType = 11
	cmdUnsubscribe            cmdType = 12
	cmdSuccess                cmdType = 13
	cmdError                  cmdType = 14
	cmdCloseProducer          cmdType = 15
	cmdCloseConsumer          cmdType = 16
	cmdProducerSuccess        cmdType = 17
	cmdPing                   cmdType = 18
	cmdPong                   cmdType = 19
	cmdRedeliver              cmdType = 20
	cmdPartitionedMetadata    cmdType = 21
	cmdPartitionedMetadataRes cmdType = 22
	cmdLookup                 cmdType = 23
	cmdLookupResponse         cmdType = 24
	cmdConsumerStats          cmdType = 25
	cmdSeek                   cmdType = 28
	cmdGetLastMessageID       cmdType = 29
	cmdGetLastMessageIDRes    cmdType = 30
	cmdActiveConsumerChange   cmdType = 31
	cmdGetTopicsOfNamespace   cmdType = 32
	cmdGetSchema              cmdType = 34
	cmdGetSchemaResponse      cmdType = 35
	cmdAuthResponse           cmdType = 37
	cmdAckResponse            cmdType = 38
	cmdGetOrCreateSchema      cmdType = 39
	cmdGetOrCreateSchemaRes   cmdType = 40
	cmdWatchTopicList         cmdType = 64
	cmdWatchTopicListClose    cmdType = 67
)

// requestIDField gives, for request commands the broker does not implement,
// the field number of their request_id, so they can be answered with an
// ERROR instead of leaving the client waiting. The transaction commands
// (50..62) all carry request_id in field 1.
var requestIDField = map[cmdType]protowire.Number{
	cmdConsumerStats:        1,
	cmdSeek:                 2,
	cmdGetTopicsOfNamespace: 1,
	cmdWatchTopicList:       1,
	cmdWatchTopicListClose:  1,
	50:                      1, // NEW_TXN
	52:                      1, // ADD_PARTITION_TO_TXN
	54:                      1, // ADD_SUBSCRIPTION_TO_TXN
	56:                      1, // END_TXN
	58:                      1, // END_TXN_ON_PARTITION
	60:                      1, // END_TXN_ON_SUBSCRIPTION
	62:                      1, // TC_CLIENT_CONNECT_REQUEST
}

// serverError is a ServerError code sent in ERROR, SEND_ERROR and lookup
// answers.
type serverError int32

// Server error codes used by the broker.
const (
	errPersistence      serverError = 2
	errConsumerBusy     serverError = 5
	errChecksum         serverError = 9
	errTopicNotFound    serverError = 11
	errConsumerNotFound serverError = 13
	errProducerBusy     serverError = 16
	errInvalidTopicName serverError = 17
	errNotAllowed       serverError = 22
)

// Subscription types of CommandSubscribe.
const (
	subExclusive int32 = 0
	subShared    int32 = 1
	subFailover  int32 = 2
	subKeyShared int32 = 3
)

// base is a decoded BaseCommand: its type and the bytes of the nested
// command of that type (empty when the command has no fields, like PING).
type base struct {
	typ  cmdType
	body []byte
}

// decodeBase decodes a BaseCommand.
func decodeBase(b []byte) (base, error) {
	var c base
	seenType := false
	nested := map[protowire.Number][]byte{}
	err := walk(b, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			c.typ, seenType = cmdType(f.v), true
		case f.typ == protowire.BytesType:
			nested[f.num] = f.data
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	if !seenType {
		return c, fmt.Errorf("%w: BaseCommand without type", errMalformed)
	}
	c.body = nested[protowire.Number(c.typ)]
	return c, nil
}

// baseCommand encodes a BaseCommand of type t whose nested command is
// written by fill (nil for a command without fields).
func baseCommand(t cmdType, fill func(*enc)) []byte {
	var e enc
	e.varint(1, uint64(t))
	if fill == nil {
		fill = func(*enc) {}
	}
	e.message(protowire.Number(t), fill)
	return e.b
}

// messageID is a MessageIdData.
type messageID struct {
	ledger, entry uint64
	partition     int32
	batchIndex    int32
	batchSize     int32
	ackSet        []int64
}

func decodeMessageID(b []byte) (messageID, error) {
	id := messageID{partition: -1, batchIndex: -1}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			id.ledger = f.v
		case 2:
			id.entry = f.v
		case 3:
			id.partition = f.i32()
		case 4:
			id.batchIndex = f.i32()
		case 5:
			id.ackSet, err = f.int64s(id.ackSet)
		case 6:
			id.batchSize = f.i32()
		}
		return err
	})
	return id, err
}

// encodeMessageID writes id into e; negative partition and batch index are
// left out (their protocol default is -1).
func encodeMessageID(e *enc, id messageID) {
	e.varint(1, id.ledger)
	e.varint(2, id.entry)
	if id.partition >= 0 {
		e.int32(3, id.partition)
	}
	if id.batchIndex >= 0 {
		e.int32(4, id.batchIndex)
	}
	for _, w := range id.ackSet {
		e.int64(5, w)
	}
	if id.batchSize > 0 {
		e.int32(6, id.batchSize)
	}
}

// keyValue is a KeyValue pair.
type keyValue struct{ key, value string }

func decodeKeyValue(b []byte) (keyValue, error) {
	var kv keyValue
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			kv.key = f.str()
		case 2:
			kv.value = f.str()
		}
		return nil
	})
	return kv, err
}
