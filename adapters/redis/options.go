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
	// DurabilityFsync (the default): the server must run appendonly yes
	// and appendfsync always, checked by New with CONFIG GET, so an
	// answered XADD is on disk.
	DurabilityFsync Durability = iota
	// DurabilityNone: an answered XADD is in the server's memory; its
	// persistence settings are not checked.
	DurabilityNone
	// DurabilityReplicas: after the XADDs, WAIT Options.Replicas
	// Options.WaitTimeout on the same connection must report enough
	// replicas.
	DurabilityReplicas
)

func (d Durability) String() string {
	if d >= 0 && int(d) < len(durabilities) {
		return durabilities[d]
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

var durabilities = []string{"fsync", "none", "replicas"}

// Options configure an Adapter. Addr is required; every zero field takes
// its documented default.
type Options struct {
	// Addr is host:port of the Redis server.
	Addr string
	// Username and Password authenticate: an ACL user, or the legacy
	// requirepass with an empty Username.
	Username, Password string
	// Consumer names this process's consumer in its LoadBalance groups (a
	// pod or host name that survives a restart). A consumer reads its own
	// pending entries again at once when it starts, so a process
	// restarted after a crash under the same name gets back what it held
	// without waiting ClaimMinIdle. Two running processes must not share
	// a name. Default: a random name per Subscribe. A Broadcast instance's
	// consumer is named after its Instance.
	Consumer string
	// DB is the logical database. Default 0.
	DB int
	// TLS, when set, connects with TLS (rediss://).
	TLS *tls.Config
	// Namespace prefixes every key the adapter creates. Default "sluice".
	Namespace string
	// RawStreamNames names a topic's stream by the topic alone, without
	// "<ns>:stream:", to share streams with other clients
	// (watermill-redisstream).
	RawStreamNames bool
	// Wire is the format Send writes (both are read). Default WireSluice.
	Wire Wire
	// Durability is the confirm level of Send. Default DurabilityFsync.
	Durability Durability
	// Replicas and WaitTimeout parameterise DurabilityReplicas. Defaults 1
	// and 1s.
	Replicas    int
	WaitTimeout time.Duration
	// ClaimMinIdle is how long an entry sits idle in another consumer's
	// pending list before it is claimed (XAUTOCLAIM min-idle-time): how
	// soon a crashed consumer's entries are redelivered to others, and
	// the bound between requeue delays kept in the pending list and those
	// kept in the delayed set. Live consumers renew what they hold every
	// third of it. Every instance of a group must use the same value.
	// Default 30s.
	ClaimMinIdle time.Duration
	// ClaimInterval is how often a subscription claims idle entries, and
	// the longest XREADGROUP BLOCK. Default 50ms.
	ClaimInterval time.Duration
	// DelayPoll is how often due delayed messages move into their streams.
	// Default 25ms.
	DelayPoll time.Duration
	// JanitorInterval is how often expired broadcast groups of the
	// streams subscribed to are destroyed. Default 5s.
	JanitorInterval time.Duration
	// InstanceTTL is the heartbeat TTL of a Broadcast instance whose
	// SubscriptionSpec.InstanceTTL is zero, for an instance that dies
	// without stopping. Default 1 minute.
	InstanceTTL time.Duration
	// DialTimeout bounds connecting. Default 5s.
	DialTimeout time.Duration
	// PoolSize is the go-redis connection pool size. Default 32.
	PoolSize int
	// Existing adopts streams and consumer groups that exist under their
	// own names. Default: none.
	Existing *Existing
	// MaxMessageBytes is the largest payload Send accepts (a
	// *ports.SizeError above it). Default 64 MiB, well below Redis'
	// proto-max-bulk-len (512 MiB), the most it may be.
	MaxMessageBytes int
	// SingleActiveLease is the TTL of a SingleActive group's lease key: a
	// crashed holder is replaced within it plus a quarter. Default 2s.
	SingleActiveLease time.Duration
	// Logger receives the capability line, warnings and go-redis's own
	// log lines. Default slog.Default().
	Logger *slog.Logger

	faults interface{ refuse(ports.Topic) bool } // test faults (export_test.go)
}

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 64 << 20

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.WaitTimeout, time.Second)
	def(&o.ClaimMinIdle, 30*time.Second)
	def(&o.ClaimInterval, 50*time.Millisecond)
	def(&o.DelayPoll, 25*time.Millisecond)
	def(&o.JanitorInterval, 5*time.Second)
	def(&o.InstanceTTL, time.Minute)
	def(&o.DialTimeout, 5*time.Second)
	def(&o.SingleActiveLease, 2*time.Second)
	if o.Namespace == "" {
		o.Namespace = "sluice"
	}
	o.Replicas = max(o.Replicas, 1)
	if o.PoolSize <= 0 {
		o.PoolSize = 32
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	bad := func(field, reason string) error {
		return &ports.ValueError{Field: "redis.Options." + field, Reason: reason}
	}
	switch {
	case o.Addr == "":
		return bad("Addr", "is required (host:port, e.g. 127.0.0.1:6379)")
	case strings.ContainsAny(o.Consumer, " \t\r\n"):
		return bad("Consumer", "must not contain white space")
	case o.ClaimMinIdle < 100*time.Millisecond:
		return bad("ClaimMinIdle", "must be at least 100ms")
	case o.MaxMessageBytes > 512<<20:
		return bad("MaxMessageBytes", "is above Redis's default proto-max-bulk-len of 512 MiB")
	case o.SingleActiveLease < 100*time.Millisecond:
		return bad("SingleActiveLease", "must be at least 100ms")
	case o.Durability < DurabilityFsync || o.Durability > DurabilityReplicas:
		return bad("Durability", "unknown level "+o.Durability.String())
	}
	return o.Existing.validate()
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
