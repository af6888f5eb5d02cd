package rocketmq

import (
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// running holds the Broadcast instances with a running subscription in
// this process, by proxy endpoint, namespace and consumer group.
//
// Within one process only: a RocketMQ 5 proxy gives its gRPC clients no
// list of a group's consumers (that is the admin API of the name server
// and brokers, which the v5 client does not speak), so a second process
// subscribing with the same Instance joins the instance's group and the
// two split its messages. Give every process its own Instance (or none:
// a random one).
var running struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// claimInstance records spec's Broadcast instance as running and returns
// the function that releases it, or refuses a second running one with a
// *ports.InstanceSharedError.
func (c *conn) claimInstance(spec ports.SubscriptionSpec, group string) (release func(), err error) {
	if spec.Mode != ports.Broadcast {
		return func() {}, nil
	}
	key := c.o.Endpoint + "\x00" + c.o.Namespace + "\x00" + group
	running.mu.Lock()
	defer running.mu.Unlock()
	if _, ok := running.m[key]; ok {
		return nil, &ports.InstanceSharedError{Instance: spec.Instance, Where: fmt.Sprintf(
			"consumer group %s on %s is consumed by a running subscription of this process (another process's is not seen: the proxy lists no consumers)", group, c.o.Endpoint)}
	}
	if running.m == nil {
		running.m = map[string]struct{}{}
	}
	running.m[key] = struct{}{}
	var once sync.Once
	return func() {
		once.Do(func() {
			running.mu.Lock()
			delete(running.m, key)
			running.mu.Unlock()
		})
	}, nil
}
