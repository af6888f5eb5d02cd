package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/ports"
)

// Existing maps logical topics and groups onto streams and consumer
// groups that exist already (written by another client), so that a
// service moves to sluice without renaming them. An adopted stream is
// never created (Subscribe fails when it does not exist) and never
// trimmed unless its topic is declared with a Retention or MaxLength. An
// adopted group keeps its position and pending entries.
type Existing struct {
	// Streams maps a logical topic to its stream key ("billing.invoices"
	// → "dc3:billing:invoices"); map "<topic>.dlq" too to adopt its
	// dead-letter stream.
	Streams map[ports.Topic]string
	// Groups maps a LoadBalance group of a topic to its consumer group.
	Groups map[ExistingGroup]string
}

// ExistingGroup names a LoadBalance group of a logical topic.
type ExistingGroup struct {
	Topic ports.Topic
	Group string
}

func (e *Existing) validate() error {
	bad := func(field, reason string) error {
		return &ports.ValueError{Field: "redis.Options.Existing." + field, Reason: reason}
	}
	for t, k := range e.streams() {
		if t.Validate() != nil || k == "" {
			return bad("Streams", fmt.Sprintf("%q → %q needs a valid topic and a stream key", string(t), k))
		}
	}
	for g, name := range e.groups() {
		if g.Topic.Validate() != nil || g.Group == "" || name == "" {
			return bad("Groups", fmt.Sprintf("%q/%q → %q needs a valid topic, a group and a group name", string(g.Topic), g.Group, name))
		}
	}
	return nil
}

func (e *Existing) streams() map[ports.Topic]string {
	if e == nil {
		return nil
	}
	return e.Streams
}

func (e *Existing) groups() map[ExistingGroup]string {
	if e == nil {
		return nil
	}
	return e.Groups
}

func (e *Existing) stream(t ports.Topic) (string, bool) {
	k, ok := e.streams()[t]
	return k, ok
}

func (e *Existing) group(t ports.Topic, g string) (string, bool) {
	n, ok := e.groups()[ExistingGroup{Topic: t, Group: g}]
	return n, ok
}

// A stream has no configuration of its own, so a declared topic's
// retention and length are kept in a hash "<ns>:topic:<stream>"
// (retention_ms, max_length) written once, by the first DeclareTopic
// (declareSpecScript). Every process trims alike: Send uses this
// adapter's record (kit.Declared), else the hash, cached; a topic found
// undeclared is looked up again after specTTL.
const specTTL = 5 * time.Second

type specCache struct {
	mu sync.Mutex
	m  map[string]cachedSpec
}

type cachedSpec struct {
	spec     ports.TopicSpec
	at       time.Time
	declared bool
}

func (c *conn) specKey(stream string) string { return c.o.Namespace + ":topic:" + stream }

// DeclareTopic records spec's retention and length for the stream (a
// stream declared before with others is a *ports.RedeclareError, left as
// it is) and creates spec.Groups at the stream's end. Retention trims at
// each XADD with MINID (the entry ids are the server's clock, now is this
// process's), MaxLength with MAXLEN; both exact.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, func(ctx context.Context, spec ports.TopicSpec) error {
		stream := c.streamKey(spec.Topic)
		want := []string{strconv.FormatInt(spec.Retention.Milliseconds(), 10), strconv.Itoa(spec.MaxLength)}
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
		c.specs.mu.Lock()
		delete(c.specs.m, stream)
		c.specs.mu.Unlock()
		for _, g := range spec.Groups {
			if err := c.DeclareGroup(ctx, spec.Topic, g); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeclareGroup creates group at the stream's end (XGROUP CREATE MKSTREAM
// $), idempotently.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := (ports.SubscriptionSpec{Topic: topic, Group: group}).Validate(); err != nil {
		return err
	}
	stream := c.streamKey(topic)
	if n, ok := c.o.Existing.group(topic, group); ok {
		group = n
	}
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
	sc := &c.specs
	sc.mu.Lock()
	e, ok := sc.m[stream]
	sc.mu.Unlock()
	if ok && (e.declared || time.Since(e.at) < specTTL) {
		return e.spec, nil
	}
	vals, err := c.rc.HMGet(ctx, c.specKey(stream), "retention_ms", "max_length").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return e.spec, fmt.Errorf("redis: look up the declaration of %s: %w", stream, err)
	}
	e = cachedSpec{at: time.Now()}
	if len(vals) == 2 && vals[0] != nil {
		ms, _ := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
		n, _ := strconv.Atoi(fmt.Sprint(vals[1]))
		e.spec, e.declared = ports.TopicSpec{Retention: time.Duration(ms) * time.Millisecond, MaxLength: n}, true
	}
	sc.mu.Lock()
	if sc.m == nil {
		sc.m = map[string]cachedSpec{}
	}
	sc.m[stream] = e
	sc.mu.Unlock()
	return e.spec, nil
}

// xadd queues the XADD of fields to stream with spec's trimming: MINID for
// the retention, MAXLEN for the length, or an XTRIM MAXLEN after it when
// both are set (XADD takes one strategy).
func xadd(ctx context.Context, pipe goredis.Pipeliner, stream string, fields []any, spec ports.TopicSpec, now time.Time) goredis.Cmder {
	args := &goredis.XAddArgs{Stream: stream, Values: fields}
	if spec.Retention > 0 {
		args.MinID = strconv.FormatInt(now.Add(-spec.Retention).UnixMilli(), 10)
	} else {
		args.MaxLen = int64(spec.MaxLength)
	}
	cmd := pipe.XAdd(ctx, args)
	if spec.Retention > 0 && spec.MaxLength > 0 {
		pipe.XTrimMaxLen(ctx, stream, int64(spec.MaxLength))
	}
	return cmd
}
