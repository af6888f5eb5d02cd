package kafkaqueue

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 1_000_000

// Options configures an [Adapter]. Brokers is required; every other zero
// field takes the default its comment or its default tag names, and the
// url tag names its URL parameter. docs/adapters/kafkaqueue.md explains
// each.
type Options struct {
	Brokers           []string // bootstrap addresses ("127.0.0.1:9092")
	Namespace         string   `default:"sluice"` // prefixes every topic and share group
	ClientID          string   `default:"sluice" url:"client_id"`
	Partitions        int32    `default:"1" url:"partitions,1..10000"`       // of the topics the adapter creates
	ReplicationFactor int16    `default:"1" url:"replication_factor,1..100"` // of the topics the adapter creates
	NoCreateTopics    bool     // the adapter creates no topic itself
	StartOldest       bool     `url:"start_oldest"` // a new share group starts at the oldest record, as with StartEarliest
	// FetchMaxWait bounds one ShareFetch long poll while no record is out
	// with a handler (then 10ms: an acknowledgement waits for the fetch in
	// flight on its share session).
	FetchMaxWait time.Duration `default:"250ms" url:"fetch_max_wait,1ms..1m"`
	// RenewFor bounds how long the lock of a record out with a handler is
	// renewed (KIP-1222, Kafka 4.2+); then it lapses and the broker
	// redelivers the record. Default 5m; negative: never renew.
	RenewFor time.Duration `url:"renew_for,-1s..24h"`
	// DeliveryLimit is the brokers' group.share.delivery.count.limit: a
	// record delivered that many times is archived. 0: New reads it from
	// a broker (DescribeConfigs, which needs DESCRIBE_CONFIGS on the
	// cluster); set it where that is not allowed. A record requeued at the
	// limit, or held at it at Stop, is requeued by a copy: none is archived.
	DeliveryLimit int `url:"delivery_limit,1..1000"`
	// MaxMessageBytes bounds a record (payload, key, headers); raise it only with message.max.bytes.
	MaxMessageBytes int    `default:"1000000"`                                          // DefaultMaxMessageBytes
	Compression     string `url:"compression,none|snappy|lz4|zstd|gzip" default:"none"` // of produced batches (kafkawire.Franz)
	Existing        *Existing
	TLS             *tls.Config // nil: plaintext
	SASL            SASL
	Logger          *slog.Logger
}

// SASL authenticates the client. Mechanism is "plain", "scram-sha-256" or
// "scram-sha-512"; empty with a User means "plain".
type SASL struct {
	Mechanism      string
	User, Password string
}

// Existing adopts topics and share groups a program without sluice made,
// under their own names.
type Existing struct {
	Topics map[ports.Topic]string // logical topic -> Kafka topic
	Groups map[string]string      // LoadBalance group -> share group
}

func (o Options) withDefaults() Options {
	kit.DefaultTags(&o)
	o.RenewFor = cmp.Or(o.RenewFor, 5*time.Minute)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	err := ports.Topic(o.Namespace).Validate()
	if _, merr := o.franz().Opts(); merr != nil {
		err = merr
	} else if len(o.Brokers) == 0 {
		err = errors.New("no Brokers")
	} else if err == nil && o.Existing != nil {
		err = kafkawire.CheckTopics("kafkaqueue.Options.Existing.Topics", o.Existing.Topics)
	}
	if err != nil {
		return fmt.Errorf("%w: kafkaqueue: Options: %w", ports.ErrInvalid, err)
	}
	return nil
}

// franz is how the adapter's clients connect (kafkawire.Franz).
func (o Options) franz() kafkawire.Franz {
	return kafkawire.Franz{Brokers: o.Brokers, ClientID: o.ClientID, TLS: o.TLS, MaxMessageBytes: o.MaxMessageBytes,
		Mechanism: o.SASL.Mechanism, User: o.SASL.User, Password: o.SASL.Password, Compression: o.Compression}
}

// clientOpts are the franz-go options every client of the adapter shares:
// kafkawire.Franz's (acks=all; the idempotent producer is franz-go's
// default, kept) and bounded request retries. validate refused what
// kafkawire.Franz refuses.
func (o Options) clientOpts() []kgo.Opt {
	opts, _ := o.franz().Opts()
	return append(opts, kgo.RequestRetries(2), kgo.RetryTimeout(10*time.Second))
}

// kafkaqueue:// and kafkaqueues:// (TLS) open the adapter; the parameters
// are in docs/adapters/kafkaqueue.md.
func init() {
	kafkawire.Register(adapters.Broker{Scheme: "kafkaqueue", TLSScheme: "kafkaqueues", Check: func(host string) string {
		return "a Kafka 4.x broker with share groups enabled listens at " + host + " and advertises an address reachable from here"
	}}, open)
}

func open(ctx context.Context, k kafkawire.URL, cfg *adapters.Config) (ports.Adapter, error) {
	o := Options{Brokers: k.Brokers, Namespace: k.Namespace, TLS: k.TLS, Logger: cfg.Logger,
		SASL: SASL{Mechanism: k.Mechanism, User: k.User, Password: k.Password}}
	o.NoCreateTopics = !cfg.Params.Bool("create_topics", true)
	if err := cfg.Params.Bind(&o, "create_topics", "mechanism"); err != nil {
		return nil, err
	}
	return New(ctx, o)
}
