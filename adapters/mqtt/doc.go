// Package mqtt is the sluice adapter for MQTT 5 brokers (mosquitto, mochi,
// any broker with shared subscriptions), built on paho.golang and autopaho.
//
// # Mapping
//
//	send           QoS 1 PUBLISH; Send returns after the broker's PUBACK.
//	               Reason code 16 (no matching subscribers) is a confirmed
//	               publish; any reason code >= 0x80 is ErrUnconfirmed.
//	ack            PUBACK, written only by Settle(Ack) (never on receipt).
//	requeue        no PUBACK: the adapter redelivers the message locally
//	               after Disposition.Delay, counting each redelivery.
//	dead letter    QoS 1 publish to "<ns>/<topic>/dlq", PUBACK of the
//	               original only after that publish was confirmed.
//	load balance   shared subscription "$share/<group>/<ns>/<topic>".
//	broadcast      a plain subscription per instance.
//	delay          the consumer's local scheduler ("sluice-deliver-at").
//	instance TTL   the MQTT session expiry interval.
//
// Each subscription owns one MQTT connection whose client id is stable
// (derived from the namespace, topic, group and instance), connects with
// CleanStart=false and a session expiry, so a restarted instance resumes
// its session and receives again what it had not acknowledged.
//
// # Acknowledgement order
//
// MQTT requires PUBACKs in the order the PUBLISHes arrived. The adapter
// keeps that order: a PUBACK that Settle asks for is written at once when
// every earlier delivery of the connection is acknowledged, and otherwise
// as soon as they are. A delivery that waits (pending in a handler,
// requeued with a backoff, delayed) holds back the PUBACKs of every later
// delivery; the broker counts those as in flight and stops sending when
// Receive Maximum of them are unacknowledged. The adapter sets Receive
// Maximum to SubscriptionSpec.InFlight, so the stall is bounded by the
// in-flight limit and lasts until the head delivery is settled. See
// docs/adapters/mqtt.md.
//
// # Connections
//
// Connections are kept up by autopaho. A lost connection is reported on
// Subscription.Errors (and Adapter.Errors for the sender); deliveries
// received on the lost connection can no longer be acknowledged there: the
// broker redelivers them on the new connection, and the adapter matches
// the redelivered copy to the delivery the core still holds (by message
// id), so it is not handed out twice.
//
// # Watermill
//
// WatermillPublisher and WatermillSubscriber expose the same connections
// as a Watermill publisher/subscriber pair, for use behind a Watermill
// router.
package mqtt
