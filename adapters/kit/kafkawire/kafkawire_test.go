package kafkawire_test

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

func TestClassByCode(t *testing.T) {
	for code, want := range map[int16]error{3: ports.ErrNotFound, 6: ports.ErrUnreachable, 7: ports.ErrTimeout,
		10: ports.ErrTooLarge, 18: ports.ErrTooLarge, 29: ports.ErrAuth, 58: ports.ErrAuth, 69: ports.ErrNotFound} {
		if class, ok := kafkawire.Class(code); !ok || class.Code != want {
			t.Errorf("Class(%d) = %+v, %v; want %v", code, class, ok, want)
		}
	}
	if class, ok := kafkawire.Class(27); ok { // REBALANCE_IN_PROGRESS: the adapter's to judge
		t.Errorf("Class(27) = %+v, want not named", class)
	}
}

func TestParseMechanism(t *testing.T) {
	for in, want := range map[string]string{"plain": "PLAIN", "Scram-Sha-256": "SCRAM-SHA-256", "SCRAM-SHA-512": "SCRAM-SHA-512"} {
		if got, err := kafkawire.ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gssapi"} {
		if _, err := kafkawire.ParseMechanism(in); err == nil || !strings.Contains(err.Error(), "is not plain, scram-sha-256 or scram-sha-512") {
			t.Errorf("ParseMechanism(%q) = %v", in, err)
		}
	}
}

func TestNames(t *testing.T) {
	if got := kafkawire.Topic("ns", "orders/eu_west"); got != "ns.orders/eu-uwest" {
		t.Errorf("Topic = %q, want ns.orders/eu-uwest", got)
	}
	if kafkawire.Topic("ns", "a_b") == kafkawire.Topic("ns", "a.b") {
		t.Error("Topic maps a_b and a.b to one Kafka topic")
	}
	lb := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	if got := kafkawire.Group("ns", lb); got != "ns.g" {
		t.Errorf("LoadBalance Group = %q, want ns.g", got)
	}
	bc := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Instance: "i1"}
	if got := kafkawire.Group("ns", bc); got != "ns.t.bcast.i1" {
		t.Errorf("Broadcast Group = %q, want ns.t.bcast.i1", got)
	}
}
