package kafka

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// StartPosition is where a consumer group starts on a partition it has
// no commit for: its end (StartNewest, the default) or its oldest record.
type StartPosition int

const (
	StartNewest StartPosition = iota
	StartOldest
)

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 1_000_000

// Options configures an [Adapter]. Brokers is required; every other zero
// field takes the default its comment or `default` tag names (a negative
// number too).
type Options struct {
	Brokers            []string            // bootstrap addresses ("127.0.0.1:9092")
	Namespace          string              `default:"sluice"` // prefixes every topic and group
	ClientID           string              `url:"client_id" default:"sluice"`
	Version            sarama.KafkaVersion // of sarama's clients (commits, admin; the franz-go clients' is negotiated); default 2.8.0
	Partitions         int32               `url:"partitions,1..10000" default:"4"`       // of the topics the adapter creates
	ReplicationFactor  int16               `url:"replication_factor,1..100" default:"1"` // of the topics the adapter creates
	NoCreateTopics     bool                // the adapter creates no topic itself
	StartFrom          StartPosition       `url:"start,newest|oldest"` // where a new group starts on a partition
	DisableIdempotence bool                // for brokers that refuse InitProducerId; acks=all stays on
	Compression        string              `url:"compression,none|snappy|lz4|zstd|gzip" default:"none"` // of produced batches (kafkawire.Franz)

	SessionTimeout    time.Duration `url:"session_timeout,100ms..1h" default:"10s"`  // consumer-group session
	HeartbeatInterval time.Duration `url:"heartbeat_interval,10ms..1h" default:"1s"` // a rebalance is noticed within one
	RebalanceTimeout  time.Duration `default:"10s"`
	// A subscription commits what acknowledgements recorded every
	// CommitInterval (100ms; a crash redelivers what was recorded since),
	// or once CommitThreshold (1000) were recorded; CommitRetry (200ms)
	// paces the retries of Flush and of rejoining a failed session.
	CommitInterval  time.Duration
	CommitThreshold int
	CommitRetry     time.Duration `default:"200ms"`
	// Buffer bounds the records pulled and not handed out, as a multiple of
	// SubscriptionSpec.InFlight; besides, the poll loop decodes up to
	// max(Buffer×InFlight, 4096) records ahead.
	Buffer int `default:"4"`
	// TransactionTimeout bounds a transaction of a transactional
	// subscription: one left open by a crashed consumer is aborted by the
	// broker after it, holding read-committed readers of its output until then.
	TransactionTimeout time.Duration `url:"txn_timeout,1s..15m" default:"10s"`
	Existing           *Existing     // adopted topics and groups
	// MaxMessageBytes bounds a record as sarama counts it (envelope and
	// overhead included); raise it only with the broker's message.max.bytes.
	MaxMessageBytes int `default:"1000000"` // DefaultMaxMessageBytes (a test holds them equal)
	Logger          *slog.Logger
	TLS             *tls.Config // nil: plaintext
	SASL            SASL
	// Sarama is called on each sarama configuration (commits, start
	// offsets, metadata, admin) after the adapter's; the franz-go consumers
	// and producers take its Net.Proxy only.
	Sarama func(*sarama.Config)
}

func (c Options) withDefaults() Options {
	kit.DefaultTags(&c)
	if c.Version == (sarama.KafkaVersion{}) {
		c.Version = sarama.V2_8_0_0
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

func (c Options) validate() error {
	if err := c.Existing.validate(); err != nil {
		return err
	}
	nsErr := ports.Topic(c.Namespace).Validate()
	if err := kit.FirstBroken("kafka.Options.",
		kit.Rule{Broken: len(c.Brokers) == 0, Field: "Brokers", Reason: "is required"},
		kit.Rule{Broken: nsErr != nil, Field: "Namespace", Reason: fmt.Sprint(nsErr)},
		kit.Rule{Broken: c.HeartbeatInterval >= c.SessionTimeout, Field: "HeartbeatInterval", Reason: "must be shorter than SessionTimeout"},
		kit.Rule{Broken: !kafkawire.IsCompression(c.Compression), Field: "Compression", Reason: "must be " + kafkawire.Compressions},
	); err != nil {
		return err
	}
	return c.SASL.validate()
}

// config is the sarama configuration of a "consumer" or other client,
// then Options.Sarama.
func (c Options) config(kind string, inFlight int) *sarama.Config {
	s := sarama.NewConfig()
	s.ClientID, s.Version = c.ClientID, c.Version
	s.Metadata.Retry.Backoff = 50 * time.Millisecond
	s.Net.DialTimeout, s.Net.ReadTimeout, s.Net.WriteTimeout = 5*time.Second, 10*time.Second, 10*time.Second
	c.applySecurity(s)
	switch kind {
	case "consumer":
		s.Consumer.Offsets.AutoCommit.Enable = false
		s.Consumer.IsolationLevel = sarama.ReadCommitted // output of aborted transactions is never read
		if c.StartFrom == StartOldest {
			s.Consumer.Offsets.Initial = sarama.OffsetOldest
		}
		s.Consumer.Group.Session.Timeout = c.SessionTimeout
		s.Consumer.Group.Heartbeat.Interval = c.HeartbeatInterval
		s.Consumer.Group.Rebalance.Timeout = c.RebalanceTimeout
		s.Consumer.Group.Rebalance.Retry.Backoff = 50 * time.Millisecond
		s.Consumer.MaxWaitTime = 100 * time.Millisecond
		s.ChannelBufferSize = max(inFlight, 16)
	}
	if c.Sarama != nil {
		c.Sarama(s)
	}
	return s
}

// franz is the franz-go clients' configuration (the producers', and the
// consumers' under their group options): kafkawire.Franz's, as
// kafkaqueue's (validate refused what it refuses; acks=all), a proxy
// dialer set by Options.Sarama, idempotence unless DisableIdempotence,
// Options.Compression, sarama's key hash (a key keeps its partition), and topics
// named by name (TxnOffsetCommit v6 and Produce v13 take ids: txnOffsets
// sends names, the tests' fault hooks match them).
func (c Options) franz() []kgo.Opt {
	f := kafkawire.Franz{Brokers: c.Brokers, ClientID: c.ClientID, TLS: c.TLS, MaxMessageBytes: c.MaxMessageBytes,
		Mechanism: string(c.SASL.Mechanism), User: c.SASL.User, Password: c.SASL.Password, Compression: c.Compression}
	if p := c.config("client", 0).Net.Proxy; p.Enable {
		f.Dial = func(_ context.Context, network, addr string) (net.Conn, error) { return p.Dialer.Dial(network, addr) }
	}
	opts, _ := f.Opts()
	if c.DisableIdempotence {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 5)
	v.SetMaxKeyVersion(int16(kmsg.Produce), 12)
	fnv32a := func(b []byte) uint32 { h := fnv.New32a(); _, _ = h.Write(b); return h.Sum32() }
	return append(opts, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a))), kgo.MaxVersions(v))
}
