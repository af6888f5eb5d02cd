package mqtt_test

import (
	"crypto/rand"
	"math/big"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/tck"
)

// TestTCK runs the whole contract kit against mosquitto (a real broker
// process) and against the embedded broker, as subtests named by broker.
func TestTCK(t *testing.T) {
	// TopicRetention sends its fresh message before the consumer starts,
	// so the consumer must resume the session within the retention: MQTT
	// expiry is whole seconds, and under load a start takes more than
	// one. 3s (both brokers check expiry when they would send).
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
		o := tckOptions()
		o.Retention = 3 * time.Second
		tck.RunWith(t, newHarness(m.URL(), 0), o)
	})
	t.Run("embedded", func(t *testing.T) {
		b, err := embedded.Start(embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		o := tckOptions()
		o.Retention = 3 * time.Second
		tck.RunWith(t, newHarness(b.URL(), 0), o)
	})
}

func tckOptions() tck.Options {
	// Session expiry has second granularity in MQTT: the instance-TTL case
	// uses the kit's default of 1s.
	return tck.Options{}
}

func cryptoRandIntn(n int64) int64 {
	v, _ := rand.Int(rand.Reader, big.NewInt(n))
	return v.Int64()
}
