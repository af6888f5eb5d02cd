// Package mqtt is the sluice adapter for MQTT 5 brokers with shared
// subscriptions (mosquitto, the embedded broker), on paho.golang: a driver under the
// portable layer. See docs/adapters/mqtt.md.
package mqtt
