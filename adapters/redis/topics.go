package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Existing maps logical topics and groups onto streams and consumer
// groups that exist already, so that a service moves to sluice without
// renaming them. An adopted stream is never created, nor trimmed unless
// its topic is declared with a Retention or MaxLength; an adopted group
// keeps its position and pending entries.
type Existing struct {
	// Streams maps a topic to its stream key; map "<topic>.dlq" too to
	// adopt its dead-letter stream.
	Streams map[ports.Topic]string
	Groups  map[ExistingGroup]string // a LoadBalance group of a topic → its consumer group
}

// ExistingGroup names a LoadBalance group of a logical topic.
type ExistingGroup = kit.ExistingGroup

func (e *Existing) validate() error {
	return errors.Join(kit.CheckExistingNames("redis.Options.Existing.Streams", e.Streams),
		kit.CheckExistingGroups("redis.Options.Existing.Groups", e.Groups))
}

// group returns the consumer group of the LoadBalance group g of t.
func (e *Existing) group(t ports.Topic, g string) string {
	return cmp.Or(e.Groups[ExistingGroup{Topic: t, Group: g}], g)
}

// A stream has no configuration of its own: a declared topic's retention
// and length are kept in the hash "<ns>:topic:<stream>", written by the
// first DeclareTopic of any process, so that every process trims alike.
// Send uses this adapter's record, else the hash, cached: a declaration
// for good, its absence (the time it was seen) for specTTL.
const specTTL = 5 * time.Second

func (c *conn) specKey(stream string) string { return c.o.Namespace + ":topic:" + stream }

// DeclareTopic stores spec's retention and length for the stream unless
// stored already (differing: a *ports.RedeclareError) and creates
// spec.Groups. Send trims at each XADD: MINID for the retention, MAXLEN
// for the length.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, func(ctx context.Context, spec ports.TopicSpec) error {
		stream := c.streamKey(spec.Topic)
		want := []string{ms(spec.Retention), strconv.Itoa(spec.MaxLength)}
		got, err := declareSpecScript.Run(ctx, c.rc, []string{c.specKey(stream)}, want[0], want[1]).StringSlice()
		if err != nil {
			return fmt.Errorf("redis: declare topic %q: %w", string(spec.Topic), err)
		}
		var diffs []string
		for i, name := range []string{"retention_ms", "max_length"} {
			if i < len(got) && got[i] != want[i] {
				diffs = append(diffs, fmt.Sprintf("%s: existing %s, declared %s", name, got[i], want[i]))
			}
		}
		if diffs != nil {
			return &ports.RedeclareError{Name: stream, Diffs: diffs}
		}
		c.specs.Delete(stream)
		return kit.DeclareGroups(c)(ctx, spec)
	})
}

// DeclareGroup creates group at the stream's end, idempotently.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	stream := c.streamKey(topic)
	group = c.o.Existing.group(topic, group)
	if err := c.rc.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil && !goredis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("redis: declare group %q on %s: %w", group, stream, err)
	}
	return nil
}

// trimFor returns the retention and length Send trims stream (topic t) to.
func (c *conn) trimFor(ctx context.Context, t ports.Topic, stream string) (ports.TopicSpec, error) {
	if s, ok := c.declared.Lookup(t); ok {
		return s, nil
	}
	switch v, _ := c.specs.Load(stream); v := v.(type) {
	case ports.TopicSpec:
		return v, nil
	case time.Time:
		if time.Since(v) < specTTL {
			return ports.TopicSpec{}, nil
		}
	}
	vals, err := c.rc.HMGet(ctx, c.specKey(stream), "retention_ms", "max_length").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return ports.TopicSpec{}, fmt.Errorf("redis: look up the declaration of %s: %w", stream, err)
	}
	if len(vals) != 2 || vals[0] == nil {
		c.specs.Store(stream, time.Now())
		return ports.TopicSpec{}, nil
	}
	ms, _ := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
	n, _ := strconv.Atoi(fmt.Sprint(vals[1]))
	spec := ports.TopicSpec{Retention: time.Duration(ms) * time.Millisecond, MaxLength: n}
	c.specs.Store(stream, spec)
	return spec, nil
}

// xadd queues the XADD of m to stream (a boxed key) with spec's trimming,
// and an XTRIM MAXLEN when both are set (XADD takes one strategy).
func (c *conn) xadd(ctx context.Context, pipe goredis.Pipeliner, stream any, m *ports.Message, spec ports.TopicSpec, now time.Time) goredis.Cmder {
	args := []any{"xadd", stream, "*"}
	if spec.Retention > 0 {
		args = []any{"xadd", stream, "minid", strconv.FormatInt(now.Add(-spec.Retention).UnixMilli(), 10), "*"}
	} else if spec.MaxLength > 0 {
		args = []any{"xadd", stream, "maxlen", spec.MaxLength, "*"}
	}
	cmd := pipe.Do(ctx, c.encodeSend(m, args...)...) // one slice holds the command: XAdd would copy the fields
	if spec.Retention > 0 && spec.MaxLength > 0 {
		pipe.XTrimMaxLen(ctx, stream.(string), int64(spec.MaxLength))
	}
	return cmd
}
