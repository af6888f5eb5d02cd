package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// kafka:// and kafka+tls:// open the Kafka adapter:
//
//	kafka://host:9092[,host2:9092…][/namespace][?client_id=…&partitions=4&replication_factor=1&start=newest|oldest&create_topics=true&session_timeout=10s&heartbeat_interval=1s&idempotent=true]
//	kafka+tls://host:9093/…   (TLS: the system roots, or WithTLS)
//
// The namespace (the path, or the shared namespace parameter, not both)
// prefixes every topic and group; a user name and password authenticate
// with SASL/PLAIN. Open connects before it returns.
func init() {
	adapters.Register("kafka", adapters.OpenerFunc(openKafka))
	adapters.Register("kafka+tls", adapters.OpenerFunc(openKafka))
}

var kafkaParams = []string{"client_id", "partitions", "replication_factor", "start", "create_topics",
	"session_timeout", "heartbeat_interval", "idempotent"}

func openKafka(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	secure := u.Scheme == "kafka+tls"
	if !secure {
		if err := cfg.PlainOnly("kafka+tls"); err != nil {
			return nil, err
		}
	}
	var kc Config
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			kc.Brokers = append(kc.Brokers, h)
		}
	}
	if len(kc.Brokers) == 0 {
		return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs at least one broker address, e.g. " + u.Scheme + "://127.0.0.1:9092"}
	}
	if ns := strings.Trim(u.Path, "/"); ns != "" {
		if cfg.Namespace != "" {
			return nil, &adapters.ParamError{Param: "namespace", Reason: "given both as the URL path and as the namespace parameter or option"}
		}
		kc.Namespace = ns
	} else {
		kc.Namespace = cfg.Namespace
	}

	p := cfg.Params
	kc.ClientID = p.String("client_id", "")
	kc.Partitions = int32(p.Int("partitions", 0, 1, 10000))
	kc.ReplicationFactor = int16(p.Int("replication_factor", 0, 1, 100))
	switch start := p.String("start", "newest"); start {
	case "newest":
		kc.StartFrom = StartNewest
	case "oldest":
		kc.StartFrom = StartOldest
	default:
		return nil, &adapters.ParamError{Param: "start", Reason: fmt.Sprintf("%q is not newest or oldest", start)}
	}
	kc.NoCreateTopics = !p.Bool("create_topics", true)
	kc.Logger = cfg.Logger
	kc.SessionTimeout = p.Duration("session_timeout", 0, 100*time.Millisecond, time.Hour)
	kc.HeartbeatInterval = p.Duration("heartbeat_interval", 0, 10*time.Millisecond, time.Hour)
	kc.DisableIdempotence = !p.Bool("idempotent", true)
	if err := p.Err(kafkaParams...); err != nil {
		return nil, err
	}

	if secure || cfg.HasCredentials {
		var tlsConf = cfg.TLS()
		user, pass := cfg.Username, cfg.Password
		if cfg.HasCredentials && !secure {
			cfg.Logger.Warn("sluice: kafka:// with SASL/PLAIN credentials sends the password unencrypted; use kafka+tls://")
		}
		kc.Sarama = func(s *sarama.Config) {
			if secure {
				s.Net.TLS.Enable = true
				s.Net.TLS.Config = tlsConf
			}
			if cfg.HasCredentials {
				s.Net.SASL.Enable = true
				s.Net.SASL.Mechanism = sarama.SASLTypePlaintext
				s.Net.SASL.User, s.Net.SASL.Password = user, pass
			}
		}
	}
	a, err := New(ctx, kc)
	if err != nil {
		if errors.Is(err, ports.ErrInvalid) || ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w; check that a Kafka broker listens at %s, that it is reachable from here and advertises an address reachable from here too", err, u.Host)
	}
	return a, nil
}
