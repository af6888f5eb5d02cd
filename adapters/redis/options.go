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
// its default.
type Options struct {
	Addr               string      // host:port of the Redis server
	Username, Password string      // an ACL user, or only a Password for the legacy requirepass
	DB                 int         // logical database, default 0
	TLS                *tls.Config // connect with TLS (rediss://)
	// Consumer names this process's consumer in its LoadBalance groups (a
	// pod or host name that survives a restart). A consumer reads its own
	// pending entries again at once when it starts, so a process
	// restarted after a crash under the same name gets back what it held
	// without waiting ClaimMinIdle. Two running processes must not share
	// a name. Default: a random name per Subscribe. A Broadcast
	// instance's consumer is named after its Instance.
	Consumer string
	// Namespace prefixes every key the adapter creates. Default "sluice".
	Namespace string
	// RawStreamNames names a topic's stream by the topic alone, to share
	// streams with other clients (watermill-redisstream).
	RawStreamNames bool
	Wire           Wire       // the format Send writes (both are read); default WireSluice
	Durability     Durability // the confirm level of Send; default DurabilityFsync
	// Replicas and WaitTimeout parameterise DurabilityReplicas; defaults 1
	// and 1s.
	Replicas    int
	WaitTimeout time.Duration
	// ClaimMinIdle is how long an entry sits idle in another consumer's
	// pending list before it is claimed (XAUTOCLAIM min-idle-time): how
	// soon a crashed consumer's entries go to the others. Live consumers
	// renew what they hold every third of it. Every instance of a group
	// must use the same value. Default 30s.
	ClaimMinIdle time.Duration
	// ClaimInterval is how often idle entries are claimed, and the
	// longest XREADGROUP BLOCK. Default 50ms.
	ClaimInterval time.Duration
	// DelayPoll is how often due delayed messages move into their
	// streams. Default 25ms.
	DelayPoll time.Duration
	// JanitorInterval is how often the expired broadcast groups of the
	// streams subscribed to are destroyed. Default 5s.
	JanitorInterval time.Duration
	// InstanceTTL is the heartbeat TTL of a Broadcast instance whose
	// SubscriptionSpec.InstanceTTL is zero, for an instance that dies
	// without stopping. Default 1 minute.
	InstanceTTL time.Duration
	DialTimeout time.Duration // bounds connecting; default 5s
	PoolSize    int           // go-redis's connection pool size; default 32
	Existing    *Existing     // streams and groups adopted under their own names
	// MaxMessageBytes is the largest payload Send accepts (a
	// *ports.SizeError above it). Default 64 MiB; at most Redis'
	// proto-max-bulk-len, 512 MiB.
	MaxMessageBytes int
	// SingleActiveLease is the TTL of a SingleActive group's lease: a
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
		DialTimeout: o.DialTimeout, PoolSize: o.PoolSize, DialerRetries: 1, // a refused connect fails at once; the portable layer retries
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaxRetries:      -1, // never retry a command on its own: XADD retried could duplicate
		DisableIdentity: true,
		Protocol:        2,
	})
}
