// Package mqtt is the sluice adapter for MQTT 5 brokers (mosquitto, mochi,
// any broker with shared subscriptions), built on paho.golang and autopaho:
// a driver (adapters/driver) under the portable layer (adapters/portable),
// which owns settlement, copies, delays, the in-flight bound and Errors.
//
//	send           QoS 1 PUBLISH, confirmed by the PUBACK (reason code 16,
//	               no matching subscribers, confirms; >= 0x80 is
//	               ErrUnconfirmed). QoS 0 for a BestEffort message or topic.
//	ack            PUBACK, written by the settlement round (never on receipt),
//	               in the order the PUBLISHes arrived (MQTT's rule): a PUBACK
//	               behind an unsettled delivery of the connection waits for it.
//	requeue        local: no PUBACK, the delivery is handed out again,
//	               counted (a copy on the topic would reach every group).
//	dead letter    a confirmed copy to "<ns>/<topic>/dlq", then the PUBACK.
//	load balance   shared subscription "$share/<group>/<ns>/<topic>".
//	broadcast      a plain subscription per instance.
//	delay          held on the consumer ("sluice-not-before").
//	instance TTL   the MQTT session expiry interval.
//
// Each subscription owns one MQTT connection whose client id is stable
// (derived from the namespace, topic, group and instance), connects with
// CleanStart=false and a session expiry, so a restarted instance resumes
// its session and receives again what it had not acknowledged. Receive
// Maximum is SubscriptionSpec.InFlight, so a delivery held back (pending,
// delayed) stalls the connection only up to the in-flight bound.
//
// Connections are kept up by autopaho; a lost connection is reported on
// Subscription.Errors. A delivery received on a lost connection can no
// longer be acknowledged there: the broker redelivers it on the new
// connection, and the adapter matches the copy to the delivery the core
// still holds (by message id), so it is not handed out twice. See
// docs/adapters/mqtt.md.
package mqtt
