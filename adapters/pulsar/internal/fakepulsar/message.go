package fakepulsar

import (
	"fmt"
	"strconv"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// messageID identifies an entry of a topic: ledger 1, entry = its index.
type messageID struct {
	topic string
	entry int
}

func (id *messageID) Serialize() []byte   { return []byte(id.String()) }
func (id *messageID) LedgerID() int64     { return 1 }
func (id *messageID) EntryID() int64      { return int64(id.entry) }
func (id *messageID) BatchIdx() int32     { return -1 }
func (id *messageID) PartitionIdx() int32 { return 0 }
func (id *messageID) BatchSize() int32    { return 0 }
func (id *messageID) String() string      { return "1:" + strconv.Itoa(id.entry) + ":0" }

// entry is a stored message.
type entry struct {
	id        messageID
	props     map[string]string
	payload   []byte
	key       string
	producer  string
	published time.Time
	deliverAt time.Time // zero: now
}

// message is one delivery of an entry.
type message struct {
	e     *entry
	count uint32
	props map[string]string // a copy per delivery: the receiver may keep it
}

func newMessage(e *entry, count uint32) *message {
	props := make(map[string]string, len(e.props))
	for k, v := range e.props {
		props[k] = v
	}
	return &message{e: e, count: count, props: props}
}

func (m *message) Topic() string                                   { return m.e.id.topic }
func (m *message) ProducerName() string                            { return m.e.producer }
func (m *message) Properties() map[string]string                   { return m.props }
func (m *message) Payload() []byte                                 { return m.e.payload }
func (m *message) ID() pulsar.MessageID                            { id := m.e.id; return &id }
func (m *message) PublishTime() time.Time                          { return m.e.published }
func (m *message) EventTime() time.Time                            { return time.Time{} }
func (m *message) Key() string                                     { return m.e.key }
func (m *message) OrderingKey() string                             { return "" }
func (m *message) RedeliveryCount() uint32                         { return m.count }
func (m *message) IsReplicated() bool                              { return false }
func (m *message) GetReplicatedFrom() string                       { return "" }
func (m *message) SchemaVersion() []byte                           { return nil }
func (m *message) GetEncryptionContext() *pulsar.EncryptionContext { return nil }
func (m *message) Index() *uint64                                  { return nil }
func (m *message) BrokerPublishTime() *time.Time                   { return nil }
func (m *message) GetSchemaValue(any) error                        { return errUnsupported("GetSchemaValue") }
func (m *message) String() string                                  { return fmt.Sprintf("fake message %s", m.e.id.String()) }
func errUnsupported(what string) error                             { return fmt.Errorf("fakepulsar: %s is not modelled", what) }

var _ pulsar.Message = (*message)(nil)
var _ pulsar.MessageID = (*messageID)(nil)
