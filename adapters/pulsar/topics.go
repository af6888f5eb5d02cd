package pulsar

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/sluicemq/sluice/ports"
)

// naming derives physical names from logical ones.
type naming struct {
	base   string // "persistent://tenant/namespace/"
	prefix string
}

func newNaming(c config) naming {
	return naming{base: "persistent://" + c.tenant + "/" + c.namespace + "/", prefix: c.prefix}
}

// topic is the persistent topic of a logical topic.
func (n naming) topic(t ports.Topic) string { return n.base + n.prefix + string(t) }

// subscription is the Pulsar subscription name of spec (defaults applied):
// the group for LOAD_BALANCE, "<group>.<instance>" for BROADCAST
// ("broadcast.<instance>" without a group).
func subscriptionName(spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.LoadBalance {
		return spec.Group
	}
	group := spec.Group
	if group == "" {
		group = "broadcast"
	}
	return group + "." + spec.Instance
}

// randomInstance is the default BROADCAST instance id: 8 random bytes.
func randomInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
