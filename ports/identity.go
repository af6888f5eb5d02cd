package ports

// IDSource says where a Delivery's ID comes from. The rule is the same on
// every adapter (docs/settlement.md, "Identity"):
//
//  1. the producer's id, when the producer set one (IDProducer): sluice's
//     HeaderID, or the broker's own message-id field (the AMQP message-id
//     property);
//  2. otherwise an identity the broker assigned when the message was
//     stored, stable across redeliveries and unique (IDBroker): Kafka
//     topic/partition/offset, the Redis entry id, the Pulsar message id,
//     the RocketMQ message id, the JMS message id of ActiveMQ;
//  3. otherwise none (IDNone): Delivery.ID is "" and HasIdentity is false.
//     An AMQP message without message-id and an MQTT message without the
//     HeaderID user property have none.
//
// A requeue or dead-letter copy that an adapter republishes carries the
// delivery's ID as HeaderID (and, for a broker's identity, HeaderIDSource
// "broker"), so the copy keeps the original's identity and its source.
type IDSource uint8

const (
	// IDNone: the message has no identity; Delivery.ID is "".
	IDNone IDSource = iota
	// IDProducer: the id the producer gave the message. A producer that
	// publishes the same message again with the same id (a retry after a
	// lost confirm) makes a duplicate that a deduplicating consumer can
	// recognise.
	IDProducer
	// IDBroker: an identity the broker (or its client library) assigned
	// to this publish: stable across redeliveries and unique, so it
	// absorbs redeliveries, but a producer that publishes the same message
	// twice makes two identities.
	IDBroker
)

// String returns "none", "producer" or "broker".
func (s IDSource) String() string {
	switch s {
	case IDProducer:
		return "producer"
	case IDBroker:
		return "broker"
	default:
		return "none"
	}
}

// HasIdentity reports whether d has an identity (ID is not empty). A
// delivery without one must not be deduplicated by ID: every such
// delivery is a different message as far as anyone can tell.
func (d *Delivery) HasIdentity() bool { return d.ID != "" }

// IdentityFromHeaders returns the identity carried in h: HeaderID with
// IDProducer, or with IDBroker when HeaderIDSource says the id was the
// broker's (a requeue or dead-letter copy of a message that had no
// producer id); "" and IDNone when h has no HeaderID. Adapters start from
// it and fall back to the broker's identity.
func IdentityFromHeaders(h Headers) (string, IDSource) {
	return Identity(h.Get(HeaderID), h.Get(HeaderIDSource))
}

// Identity is the identity rule of IdentityFromHeaders for the values of
// HeaderID and HeaderIDSource, read from wherever the headers are.
func Identity(id, source string) (string, IDSource) {
	switch {
	case id == "":
		return "", IDNone
	case source == "broker":
		return id, IDBroker
	default:
		return id, IDProducer
	}
}
