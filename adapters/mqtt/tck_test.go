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
// process) and against the embedded mochi broker, as subtests named by
// broker.
func TestTCK(t *testing.T) {
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
		// TopicRetention sends its fresh message before the consumer
		// starts, so the consumer must resume the session within the
		// retention: MQTT expiry is whole seconds, and under load a
		// start takes more than one. 3s (mosquitto checks at delivery).
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
		// mochi's Receive Maximum flow control stalls (see the docs): the
		// embedded broker runs with 65535, as Options.Embedded sets it.
		// mochi expires messages in whole seconds and sweeps its sessions
		// once a second: a queued message outlives its expiry interval by
		// up to 2s. TopicRetention waits twice the retention (the old
		// message must be gone) and the fresh one must survive the
		// consumer's start: 5s.
		o := tckOptions()
		o.Retention = 5 * time.Second
		// The same sweep bounds session expiry: mochi removes a session
		// once the whole seconds since its disconnect exceed the TTL, at
		// its next once-a-second sweep, so up to TTL+2s after the
		// disconnect. The instance-TTL case waits 3×TTL: with a 1s TTL
		// that left no margin (a run failed with the session kept), with
		// 2s it waits 6s for at most 4s.
		o.InstanceTTL = 2 * time.Second
		tck.RunWith(t, newHarness(b.URL(), 65535), o)
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
