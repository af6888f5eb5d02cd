package kafka

import (
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestOptionsDefaults(t *testing.T) {
	got := Options{Partitions: -2, SessionTimeout: -time.Second}.withDefaults()
	want := Options{Namespace: "sluice", ClientID: "sluice", Version: sarama.V2_8_0_0, Partitions: 4, ReplicationFactor: 1,
		SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 10 * time.Second,
		CommitRetry: 200 * time.Millisecond, Buffer: 4, MaxMessageBytes: DefaultMaxMessageBytes, Logger: slog.Default()}
	if got.Namespace != want.Namespace || got.ClientID != want.ClientID || got.Version != want.Version ||
		got.Partitions != want.Partitions || got.ReplicationFactor != want.ReplicationFactor ||
		got.SessionTimeout != want.SessionTimeout || got.HeartbeatInterval != want.HeartbeatInterval ||
		got.RebalanceTimeout != want.RebalanceTimeout || got.CommitRetry != want.CommitRetry ||
		got.Buffer != want.Buffer || got.MaxMessageBytes != want.MaxMessageBytes || got.Logger != want.Logger {
		t.Fatalf("withDefaults = %+v, want %+v", got, want)
	}
}
