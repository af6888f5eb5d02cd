package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Durability is what a confirmed Send waits for after Redis answered XADD.
type Durability int

const (
	// DurabilityFsync (the default): New checks with CONFIG GET that the
	// server runs appendonly yes and appendfsync always.
	DurabilityFsync Durability = iota
	// DurabilityNone: in the server's memory; persistence is not checked.
	DurabilityNone
	// DurabilityReplicas: WAIT Replicas WaitTimeout after the XADDs.
	DurabilityReplicas
)

var durabilities = []string{"fsync", "none", "replicas"}

func (d Durability) String() string {
	if d >= 0 && int(d) < len(durabilities) {
		return durabilities[d]
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Options configure an Adapter. Addr is required; a zero field takes its
// default. docs/adapters/redis.md explains each.
type Options struct {
	Addr               string      // host:port of the Redis server
	Username, Password string      // an ACL user, or only a Password for requirepass
	DB                 int         // logical database, default 0
	TLS                *tls.Config // connect with TLS (rediss://)
	// Consumer names this process's consumer in its LoadBalance groups:
	// a name that survives a restart gets back its pending entries at
	// once. Two running processes must not share it. Default: random.
	Consumer       string        `url:"consumer"`
	Namespace      string        // prefixes every key; default "sluice"
	RawStreamNames bool          `url:"raw_stream_names"`               // a topic's stream is the topic alone (watermill-redisstream)
	Wire           Wire          `url:"wire,sluice|watermill"`          // the format Send writes (both are read); default WireSluice
	Durability     Durability    `url:"durability,fsync|none|replicas"` // the confirm level of Send; default DurabilityFsync
	Replicas       int           `url:"replicas,1..64"`                 // for DurabilityReplicas; default 1
	WaitTimeout    time.Duration `url:"wait_timeout,1ms..1m"`
	// ClaimMinIdle is how long an entry sits idle in another consumer's
	// pending list before it is claimed; the same for every instance of
	// a group. Default 30s.
	ClaimMinIdle    time.Duration `url:"claim_min_idle,100ms..24h"`
	ClaimInterval   time.Duration `url:"claim_interval,1ms..1m"`    // how often idle entries are claimed, the longest BLOCK; default 50ms
	DelayPoll       time.Duration `url:"delay_poll,1ms..1m"`        // how often due delayed messages move; default 25ms
	JanitorInterval time.Duration `url:"janitor_interval,10ms..1h"` // how often expired broadcast groups are destroyed; default 5s
	InstanceTTL     time.Duration `url:"instance_ttl,10ms..8760h"`  // a Broadcast instance's default heartbeat TTL; default 1m
	DialTimeout     time.Duration `url:"dial_timeout,10ms..1h"`     // default 5s
	PoolSize        int           `url:"pool_size,1..4096"`         // go-redis's pool size; default 32
	Existing        *Existing     // streams and groups adopted under their own names
	// MaxMessageBytes is the largest payload Send accepts. Default 64 MiB,
	// at most 512 MiB (Redis' proto-max-bulk-len).
	MaxMessageBytes   int
	SingleActiveLease time.Duration // TTL of a SingleActive group's lease; default 2s
	Logger            *slog.Logger  // also gets go-redis's log lines; default slog.Default()

	faults interface{ refuse(ports.Topic) bool } // test faults (export_test.go)
}

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 64 << 20

func (o Options) withDefaults() Options {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.WaitTimeout, time.Second}, {&o.ClaimMinIdle, 30 * time.Second}, {&o.ClaimInterval, 50 * time.Millisecond},
		{&o.DelayPoll, 25 * time.Millisecond}, {&o.JanitorInterval, 5 * time.Second}, {&o.InstanceTTL, time.Minute},
		{&o.DialTimeout, 5 * time.Second}, {&o.SingleActiveLease, 2 * time.Second}} {
		*d.v = cmp.Or(max(*d.v, 0), d.def)
	}
	o.Namespace = cmp.Or(o.Namespace, "sluice")
	o.Replicas, o.PoolSize = max(o.Replicas, 1), cmp.Or(max(o.PoolSize, 0), 32)
	o.MaxMessageBytes = cmp.Or(max(o.MaxMessageBytes, 0), DefaultMaxMessageBytes)
	o.Logger, o.Existing = cmp.Or(o.Logger, slog.Default()), cmp.Or(o.Existing, &Existing{})
	return o
}

func (o Options) validate() error {
	bad := kit.Invalid("redis.Options.")
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
		DialTimeout: o.DialTimeout, PoolSize: o.PoolSize, DialerRetries: 1, // a refused connect fails at once
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaxRetries: -1, DisableIdentity: true, Protocol: 2, // MaxRetries: an XADD retried could duplicate
	})
}

// redis://[user:password@]host:6379[/db][?params] and rediss:// (TLS)
// open the adapter; docs/adapters/redis.md lists the parameters. Open
// connects and checks the durability level before it returns.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "redis", TLSScheme: "rediss", PasswordOnly: true, Open: openURL,
		Example: "redis://127.0.0.1:6379/0"})
}

func openURL(ctx context.Context, u *url.URL, cfg *adapters.Config, secure bool) (ports.Adapter, error) {
	o, err := optionsFromURL(u, cfg, secure)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

func optionsFromURL(u *url.URL, cfg *adapters.Config, secure bool) (Options, error) {
	bad := func(param, reason string) (Options, error) {
		return Options{}, &adapters.ParamError{Param: param, Reason: reason}
	}
	o := Options{Addr: u.Host, Namespace: cfg.Namespace, Logger: cfg.Logger, Username: cfg.Username, Password: cfg.Password}
	if u.Port() == "" {
		o.Addr = u.Host + ":6379"
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return bad("path", fmt.Sprintf("%q is not a database number (write %s://host:6379/0)", db, u.Scheme))
		}
		o.DB = n
	}
	if secure {
		o.TLS = cfg.TLS()
	}
	return o, cfg.Params.Bind(&o)
}
