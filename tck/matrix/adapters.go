package matrix

import (
	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/adapters/kafkaqueue"
	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/rocketmq"
)

// Adapters are the rows of the matrix, one line per adapter: its name, its
// package, what its TCK runs against, and its declared capabilities.
var Adapters = []Adapter{
	{Name: "mem", Package: "adapters/mem", Broker: "the in-process broker (it is the broker)", Caps: mem.Capabilities()},
	{Name: "amqp", Package: "adapters/amqp", Broker: "RabbitMQ, a private node the tests start; the column shows the default quorum queues (`TestTCKClassic` runs classic queues, whose redelivery count is a lower bound)", Caps: amqp.Capabilities()},
	{Name: "kafka", Package: "adapters/kafka", Broker: "kfake, an in-process Kafka wire-protocol peer (not Apache Kafka); a real cluster when `KAFKA_BROKERS` is set", Caps: kafka.Capabilities()},
	{Name: "kafkaqueue", Package: "adapters/kafkaqueue", Broker: "kfake, an in-process Kafka wire-protocol peer serving KIP-932 share groups (not Apache Kafka)", Caps: kafkaqueue.Capabilities()},
	{Name: "mqtt", Package: "adapters/mqtt", Broker: "mosquitto 2 (a real broker process the tests start), and the embedded broker (sluice's own, in process)", Caps: mqtt.Capabilities()},
	{Name: "activemq", Package: "adapters/activemq", Broker: "ActiveMQ Classic 5.17 (Debian), a private broker JVM the tests start, over STOMP 1.2", Caps: activemq.Capabilities()},
	{Name: "pulsar", Package: "adapters/pulsar", Broker: "a real Pulsar at `PULSAR_URL` (skipped when unset); in every run pulsartest, the project's Pulsar wire-protocol test broker, and fakepulsar, a model of the client — neither is Apache Pulsar, so neither certifies", Caps: pulsar.Capabilities()},
	{Name: "redis", Package: "adapters/redis", Broker: "redis-server 7.0 from Debian (a private process the tests start, appendonly yes + appendfsync always)", Caps: redis.Capabilities()},
	{Name: "rocketmq", Package: "adapters/rocketmq", Broker: "not certified (no real broker in the default run): rocketmqtest, the project's in-process RocketMQ 5 gRPC protocol peer, with the official v5 client (not Apache RocketMQ); a real proxy when `ROCKETMQ_ENDPOINT` is set (skipped when unset)", Caps: rocketmq.Capabilities()},
}
