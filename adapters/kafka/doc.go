// Package kafka is the sluice adapter for Apache Kafka and Kafka
// wire-protocol brokers, on github.com/twmb/franz-go (consuming and
// producing) and github.com/IBM/sarama (commits and admin): a driver under the
// portable layer (adapters/portable). Acknowledgements are recorded per
// offset and the contiguous prefix is committed; requeue, dead letters and
// delays are the portable layer's copies. docs/adapters/kafka.md describes
// the mapping, the names, the commit window and the URL.
package kafka
