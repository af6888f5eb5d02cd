package redis

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/ports"
)

// Durability is what a confirmed Send waits for after Redis answered XADD.
type Durability int

const (
	// DurabilityFsync: the server must run with appendonly yes and
	// appendfsync always, so the answer to XADD means the entry is on disk.
	// New checks both with CONFIG GET and fails if either is different (or
	// if CONFIG is not allowed: then choose DurabilityNone or
	// DurabilityReplicas explicitly). This is the default (the zero value).
	DurabilityFsync Durability = iota
	// DurabilityNone: Send is confirmed when the server answered XADD (the
	// entry is in the server's memory; what survives a crash depends on the
	// server's persistence settings, which the adapter does not check).
	DurabilityNone
	// DurabilityReplicas: after the pipelined XADDs Send issues WAIT with
	// Options.Replicas and Options.WaitTimeout on the same connection and
	// confirms only if at least Replicas replicas acknowledged the writes.
	DurabilityReplicas
)

func (d Durability) String() string {
	switch d {
	case DurabilityNone:
		return "none"
	case DurabilityFsync:
		return "fsync"
	case DurabilityReplicas:
		return "replicas"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Options configure an Adapter. Addr is required; every other zero field
// takes the documented default.
type Options struct {
	// Addr is host:port of the Redis server.
	Addr string
	// Username and Password authenticate (ACL user, or the legacy
	// requirepass with an empty Username).
	Username, Password string
	// Consumer is the consumer name of this process's LoadBalance
	// subscriptions (a pod or host name that a restarted process keeps).
	// A consumer reads its own pending entries again at once when it
	// starts, so a process restarted after a crash under the same name
	// gets back what it held without waiting ClaimMinIdle; the entries
	// of other consumers are claimed once idle for ClaimMinIdle. Two
	// running processes must not share a name. Default: a random name
	// per Subscribe ("c-<id>"). A Broadcast instance's consumer is named
	// after its Instance.
	Consumer string
	// DB is the logical database. Default 0.
	DB int
	// TLS, when set, connects with TLS (rediss://).
	TLS *tls.Config
	// Namespace prefixes every key the adapter creates
	// ("<ns>:stream:<topic>", "<ns>:delayed", "<ns>:hb:…"). Default "sluice".
	Namespace string
	// RawStreamNames names each topic's stream by the topic alone, without
	// the "<ns>:stream:" prefix (the delayed set and heartbeats keep the
	// namespace). Use it to share streams with other clients, such as
	// watermill-redisstream, which names a stream by its topic.
	RawStreamNames bool
	// Wire is the entry format Send (and dead letters, requeued copies)
	// write. Default WireSluice; WireWatermill for watermill-redisstream
	// consumers.
	Wire Wire
	// Durability is the confirm level of Send. Default DurabilityFsync,
	// checked against the server's configuration at New.
	Durability Durability
	// Replicas and WaitTimeout parameterise DurabilityReplicas (WAIT
	// numreplicas timeout). Replicas default 1, WaitTimeout default 1s.
	Replicas    int
	WaitTimeout time.Duration

	// ClaimMinIdle is how long an entry must sit unacknowledged in a
	// consumer's pending list before another consumer of the group claims it
	// (XAUTOCLAIM min-idle-time). It bounds how soon the entries of a
	// crashed consumer are redelivered, and it is the scale of requeue
	// delays that stay in the pending list (longer delays go through the
	// delayed set). Every instance of a group must use the same value.
	// Live consumers renew the idle time of what they hold every
	// ClaimMinIdle/3, so a slow handler is not robbed. Default 30s.
	ClaimMinIdle time.Duration
	// ClaimInterval is how often a subscription runs XAUTOCLAIM (and the
	// longest XREADGROUP BLOCK). Default 50ms.
	ClaimInterval time.Duration
	// DelayPoll is how often the adapter moves due delayed messages from
	// the delayed set into their streams. Default 25ms.
	DelayPoll time.Duration
	// JanitorInterval is how often the adapter destroys expired broadcast
	// groups of the streams it subscribed to. Default 5s.
	JanitorInterval time.Duration
	// InstanceTTL is the heartbeat TTL of a Broadcast instance whose
	// SubscriptionSpec.InstanceTTL is zero, for the case where the instance
	// dies without stopping (a stopped one removes its group at once).
	// Default 1 minute.
	InstanceTTL time.Duration
	// DialTimeout bounds connecting. Default 5s.
	DialTimeout time.Duration
	// PoolSize is the go-redis connection pool size. Default 32.
	PoolSize int
	// Existing adopts streams and consumer groups that exist already
	// under their own names (see Existing). Default: none.
	Existing *Existing
	// MaxMessageBytes is the largest payload Send accepts; a larger one
	// fails with a *ports.SizeError before anything is written. Redis
	// refuses a bulk string above proto-max-bulk-len (512 MiB by default),
	// and a whole command above client-query-buffer-limit (1 GiB); the
	// default bound, 64 MiB (DefaultMaxMessageBytes), stays well below
	// both with any envelope and keeps one entry from taking a large share
	// of the server's memory. Counts the payload only.
	MaxMessageBytes int
	// SingleActiveLease is the TTL of a SingleActive group's lease key:
	// a crashed holder is replaced within it (plus a quarter of it).
	// Default 2s.
	SingleActiveLease time.Duration
	// Logger receives the capability line, warnings and go-redis's own
	// log lines (see the package documentation). Default slog.Default().
	Logger *slog.Logger

	faults *Faults
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = "sluice"
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = time.Second
	}
	if o.ClaimMinIdle <= 0 {
		o.ClaimMinIdle = 30 * time.Second
	}
	if o.ClaimInterval <= 0 {
		o.ClaimInterval = 50 * time.Millisecond
	}
	if o.DelayPoll <= 0 {
		o.DelayPoll = 25 * time.Millisecond
	}
	if o.JanitorInterval <= 0 {
		o.JanitorInterval = 5 * time.Second
	}
	if o.InstanceTTL <= 0 {
		o.InstanceTTL = time.Minute
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 32
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.SingleActiveLease <= 0 {
		o.SingleActiveLease = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 64 << 20

func (o Options) validate() error {
	if strings.ContainsAny(o.Consumer, " \t\r\n") {
		return &ports.ValueError{Field: "redis.Options.Consumer", Reason: "must not contain white space"}
	}
	if o.Addr == "" {
		return &ports.ValueError{Field: "redis.Options.Addr", Reason: "is required (host:port, e.g. 127.0.0.1:6379)"}
	}
	if o.ClaimMinIdle < 100*time.Millisecond {
		return &ports.ValueError{Field: "redis.Options.ClaimMinIdle", Reason: "must be at least 100ms"}
	}
	if o.MaxMessageBytes > 512<<20 {
		return &ports.ValueError{Field: "redis.Options.MaxMessageBytes", Reason: "is above Redis's default proto-max-bulk-len of 512 MiB"}
	}
	if o.SingleActiveLease < 100*time.Millisecond {
		return &ports.ValueError{Field: "redis.Options.SingleActiveLease", Reason: "must be at least 100ms"}
	}
	if err := o.Existing.validate(); err != nil {
		return err
	}
	switch o.Durability {
	case DurabilityNone, DurabilityFsync, DurabilityReplicas:
	default:
		return &ports.ValueError{Field: "redis.Options.Durability", Reason: "unknown level " + o.Durability.String()}
	}
	return nil
}

func (o Options) client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLS,
		DialTimeout: o.DialTimeout, PoolSize: o.PoolSize,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaxRetries:      -1, // never retry a command on its own: XADD retried could duplicate
		DisableIdentity: true,
		Protocol:        2,
	})
}

// Faults switch test faults on adapters made with WithFaults.
type Faults struct {
	failDL   atomicBool
	failSend atomicBool
}

// FailDeadLetters makes dead-letter publishes fail (true) or succeed.
func (f *Faults) FailDeadLetters(v bool) { f.failDL.Store(v) }

// FailSends makes Send report every message unconfirmed (true) without
// writing it, or work again (false).
func (f *Faults) FailSends(v bool) { f.failSend.Store(v) }

// WithFaults returns o with fault switches for tests.
func WithFaults(o Options, f *Faults) Options { o.faults = f; return o }
