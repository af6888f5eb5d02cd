package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

var _ tck.Topology = (*harness)(nil)

// CreateExisting creates, with go-redis as another client would, a stream
// of its own key with a consumer group of its own name, and returns an
// adapter that adopts both (Options.Existing). Unchanged compares the
// stream's groups and the keys under the legacy prefix with what
// CreateExisting saw (entries come and go; the topology must not).
func (h *harness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	rc := goredis.NewClient(&goredis.Options{Addr: h.addr, Protocol: 2})
	prefix := "legacy:" + h.ns + ":"
	stream, gname := prefix+"stream", "legacy-"+group
	if err := rc.XGroupCreateMkStream(ctx, stream, gname, "$").Err(); err != nil {
		rc.Close()
		return tck.Existing{}, err
	}
	snapshot := func(ctx context.Context) (string, error) {
		keys, err := rc.Keys(ctx, prefix+"*").Result()
		if err != nil {
			return "", err
		}
		gs, err := rc.XInfoGroups(ctx, stream).Result()
		if err != nil {
			return "", err
		}
		lines := keys
		for _, g := range gs {
			lines = append(lines, "group "+g.Name)
		}
		slices.Sort(lines)
		return strings.Join(lines, "; "), nil
	}
	before, err := snapshot(ctx)
	if err != nil {
		rc.Close()
		return tck.Existing{}, err
	}
	a, err := redis.New(ctx, redis.WithFaults(redis.Options{Addr: h.addr, Namespace: h.ns, Existing: &redis.Existing{
		Streams: map[ports.Topic]string{topic: stream},
		Groups:  map[redis.ExistingGroup]string{{Topic: topic, Group: group}: gname},
	}}, h.faults))
	if err != nil {
		rc.Close()
		return tck.Existing{}, err
	}
	return tck.Existing{
		Adapter: closing{a, rc},
		Names:   fmt.Sprintf("stream %s, group %s: %s", stream, gname, before),
		Publish: func(ctx context.Context, payload []byte) error {
			return rc.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"payload", payload}}).Err()
		},
		Unchanged: func(ctx context.Context) error {
			after, err := snapshot(ctx)
			if err != nil {
				return err
			}
			if after != before {
				return fmt.Errorf("before: %s\nafter:  %s", before, after)
			}
			return nil
		},
	}, nil
}

// closing closes the raw client with the adapter.
type closing struct {
	*redis.Adapter
	rc *goredis.Client
}

func (c closing) Close(ctx context.Context) error {
	err := c.Adapter.Close(ctx)
	c.rc.Close()
	return err
}
