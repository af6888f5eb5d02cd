package all_test

import (
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/all"
)

func TestEverySchemeRegistered(t *testing.T) {
	want := []string{"amqp", "amqps", "kafka", "kafka+tls", "mem", "mqtt", "mqtt+embedded", "pulsar", "pulsar+ssl"}
	got := adapters.Schemes()
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf("scheme %s not registered by adapters/all (registered: %v)", s, got)
		}
	}
}
