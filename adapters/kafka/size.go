package kafka

import (
	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// recordVersion is the record format sarama sizes messages in (Kafka
// 0.11+ record batches, which Config.Version always is).
const recordVersion = 2

// checkSize refuses pm before it is handed to the producer when its size
// as sarama counts it (payload, key, headers and the record overhead) is
// above limit: a *ports.SizeError (ErrInvalid), so it is not mistaken for
// an unconfirmed send that a retry could fix.
func checkSize(m *ports.Message, pm *sarama.ProducerMessage, limit int) error {
	return m.CheckSize(limit, pm.ByteSize(recordVersion)-len(m.Payload))
}
