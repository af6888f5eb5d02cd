package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// Streams maps a logical topic to its stream key (e.g.
	// "billing.invoices" → "dc3:billing:invoices"). Map "<topic>.dlq" too
	// to adopt its dead-letter stream.
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
	if e == nil {
		return nil
	}
	for t, k := range e.Streams {
		if err := t.Validate(); err != nil || k == "" {
			return &ports.ValueError{Field: "redis.Options.Existing.Streams", Reason: fmt.Sprintf("%q → %q needs a valid topic and a stream key", string(t), k)}
		}
	}
	for g, name := range e.Groups {
		if err := g.Topic.Validate(); err != nil || g.Group == "" || name == "" {
			return &ports.ValueError{Field: "redis.Options.Existing.Groups", Reason: fmt.Sprintf("%q/%q → %q needs a valid topic, a group and a group name", string(g.Topic), g.Group, name)}
		}
	}
	return nil
}

func (e *Existing) stream(t ports.Topic) (string, bool) {
	if e == nil {
		return "", false
	}
	k, ok := e.Streams[t]
	return k, ok
}

func (e *Existing) group(t ports.Topic, g string) (string, bool) {
	if e == nil {
		return "", false
	}
	n, ok := e.Groups[ExistingGroup{Topic: t, Group: g}]
	return n, ok
}

// A Redis stream has no configuration of its own, so a declared topic's
// retention and length are kept in a hash beside the stream
// ("<ns>:topic:<stream>": retention_ms, max_length), written once by the
// first DeclareTopic. Every process then trims the same way: Send looks
// the topic up in this adapter's record (kit.Declared) and otherwise in
// the hash (cached; a topic found undeclared is looked up again after
// specTTL).
const specTTL = 5 * time.Second

func (c *conn) specKey(stream string) string { return c.o.Namespace + ":topic:" + stream }

// declareSpecScript stores retention and length unless the hash exists,
// and returns what is stored.
var declareSpecScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'retention_ms', ARGV[1], 'max_length', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'retention_ms', 'max_length')
`)

// DeclareTopic implements driver.TopicDeclarer: it records spec's
// retention and length for the stream (see specKey) — a stream declared
// before with others fails with a *ports.RedeclareError and is left as it
// is — and creates each of spec.Groups at the stream's end (XGROUP CREATE
// MKSTREAM $), so they keep what is published from then on. Retention is
// enforced by trimming at each XADD with MINID (entries whose id, the
// server's clock, is older than now minus Retention, by this process's
// clock), MaxLength with MAXLEN; both exact (=), not approximate.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, c.createTopic)
}

func (c *conn) createTopic(ctx context.Context, spec ports.TopicSpec) error {
	stream := c.streamKey(spec.Topic)
	ret, ml := strconv.FormatInt(spec.Retention.Milliseconds(), 10), strconv.Itoa(spec.MaxLength)
	got, err := declareSpecScript.Run(ctx, c.rc, []string{c.specKey(stream)}, ret, ml).StringSlice()
	if err != nil {
		return fmt.Errorf("redis: declare topic %q: %w", string(spec.Topic), err)
	}
	if len(got) == 2 && (got[0] != ret || got[1] != ml) {
		var diffs []string
		if got[0] != ret {
			diffs = append(diffs, fmt.Sprintf("retention_ms: existing %s, declared %s", got[0], ret))
		}
		if got[1] != ml {
			diffs = append(diffs, fmt.Sprintf("max_length: existing %s, declared %s", got[1], ml))
		}
		return &ports.RedeclareError{Name: stream, Diffs: diffs}
	}
	c.specs.forget(stream)
	for _, g := range spec.Groups {
		if err := c.DeclareGroup(ctx, spec.Topic, g); err != nil {
			return err
		}
	}
	return nil
}

// DeclareGroup implements driver.GroupDeclarer: XGROUP CREATE at the
// stream's end (MKSTREAM), idempotent.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	stream := c.streamKey(topic)
	name := group
	if n, ok := c.o.Existing.group(topic, group); ok {
		name = n
	}
	err := c.rc.XGroupCreateMkStream(ctx, stream, name, "$").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redis: declare group %q on %s: %w", name, stream, err)
	}
	return nil
}

// trim is the retention and length a Send applies to stream.
type trim struct {
	retention time.Duration
	maxLen    int
}

// specCache caches the trims read from the spec hashes.
type specCache struct {
	mu sync.Mutex
	m  map[string]cachedTrim
}

type cachedTrim struct {
	t  trim
	at time.Time
	ok bool // declared
}

func (c *specCache) forget(stream string) {
	c.mu.Lock()
	delete(c.m, stream)
	c.mu.Unlock()
}

// trimFor returns how Send trims stream (topic t).
func (c *conn) trimFor(ctx context.Context, t ports.Topic, stream string) (trim, error) {
	if s, ok := c.declared.Lookup(t); ok {
		return trim{s.Retention, s.MaxLength}, nil
	}
	sc := &c.specs
	sc.mu.Lock()
	e, ok := sc.m[stream]
	sc.mu.Unlock()
	if ok && (e.ok || time.Since(e.at) < specTTL) {
		return e.t, nil
	}
	vals, err := c.rc.HMGet(ctx, c.specKey(stream), "retention_ms", "max_length").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return trim{}, fmt.Errorf("redis: look up the declaration of %s: %w", stream, err)
	}
	e = cachedTrim{at: time.Now()}
	if len(vals) == 2 && vals[0] != nil {
		ms, _ := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
		n, _ := strconv.Atoi(fmt.Sprint(vals[1]))
		e.t, e.ok = trim{time.Duration(ms) * time.Millisecond, n}, true
	}
	sc.mu.Lock()
	if sc.m == nil {
		sc.m = map[string]cachedTrim{}
	}
	sc.m[stream] = e
	sc.mu.Unlock()
	return e.t, nil
}

// xadd queues the XADD of fields to stream on pipe with tr's trimming
// (MINID for retention, and XTRIM MAXLEN after it when both are set:
// XADD takes one strategy).
func xadd(ctx context.Context, pipe goredis.Pipeliner, stream string, fields []any, tr trim, now time.Time) goredis.Cmder {
	args := &goredis.XAddArgs{Stream: stream, Values: fields}
	if tr.retention > 0 {
		args.MinID = strconv.FormatInt(now.Add(-tr.retention).UnixMilli(), 10)
	} else if tr.maxLen > 0 {
		args.MaxLen = int64(tr.maxLen)
	}
	cmd := pipe.XAdd(ctx, args)
	if tr.retention > 0 && tr.maxLen > 0 {
		pipe.XTrimMaxLen(ctx, stream, int64(tr.maxLen))
	}
	return cmd
}
