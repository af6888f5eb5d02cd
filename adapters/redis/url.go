package redis

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// redis://[user:password@]host:6379[/db][?params] and rediss:// (TLS)
// open the adapter; docs/adapters/redis.md lists the parameters. Open
// connects and checks the durability level before it returns.
func init() {
	for _, scheme := range []string{"redis", "rediss"} {
		adapters.Register(scheme, adapters.PasswordOnly(adapters.OpenerFunc(openURL)))
	}
}

func openURL(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	o, err := optionsFromURL(u, cfg)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

func optionsFromURL(u *url.URL, cfg *adapters.Config) (Options, error) {
	bad := func(param, reason string) (Options, error) {
		return Options{}, &adapters.ParamError{Param: param, Reason: reason}
	}
	secure := u.Scheme == "rediss"
	if err := cfg.PlainOnly("rediss"); err != nil && !secure {
		return Options{}, err
	}
	if u.Host == "" {
		return bad("host", u.Scheme+":// needs a server address, e.g. "+u.Scheme+"://127.0.0.1:6379/0")
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
	p := cfg.Params
	d := p.String("durability", "fsync")
	if o.Durability = Durability(slices.Index(durabilities, d)); o.Durability < 0 {
		return bad("durability", fmt.Sprintf("%q is not fsync, none or replicas", d))
	}
	w := p.String("wire", "sluice")
	if o.Wire = Wire(slices.Index([]string{"sluice", "watermill"}, w)); o.Wire < 0 {
		return bad("wire", fmt.Sprintf("%q is not sluice or watermill", w))
	}
	o.Replicas = p.Int("replicas", 0, 1, 64)
	o.WaitTimeout = p.Duration("wait_timeout", 0, time.Millisecond, time.Minute)
	o.ClaimMinIdle = p.Duration("claim_min_idle", 0, 100*time.Millisecond, 24*time.Hour)
	o.ClaimInterval = p.Duration("claim_interval", 0, time.Millisecond, time.Minute)
	o.DelayPoll = p.Duration("delay_poll", 0, time.Millisecond, time.Minute)
	o.JanitorInterval = p.Duration("janitor_interval", 0, 10*time.Millisecond, time.Hour)
	o.InstanceTTL = p.Duration("instance_ttl", 0, 10*time.Millisecond, 365*24*time.Hour)
	o.DialTimeout = p.Duration("dial_timeout", 0, 10*time.Millisecond, time.Hour)
	o.PoolSize = p.Int("pool_size", 0, 1, 4096)
	o.RawStreamNames = p.Bool("raw_stream_names", false)
	o.Consumer = p.String("consumer", "")
	return o, p.Err("durability", "replicas", "wait_timeout", "claim_min_idle", "claim_interval", "delay_poll",
		"janitor_interval", "instance_ttl", "dial_timeout", "pool_size", "wire", "raw_stream_names", "consumer")
}
