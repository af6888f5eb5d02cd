package kafka

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// StartPosition is where a consumer group starts on a partition it has
// never committed an offset for.
type StartPosition int

const (
	// StartNewest starts at the end of the partition (the default).
	StartNewest StartPosition = iota
	// StartOldest starts at the oldest retained message.
	StartOldest
)

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 1_000_000

// Options configures an [Adapter]. Brokers is required; every other zero
// field takes the default its comment names.
type Options struct {
	Brokers           []string            // bootstrap addresses ("127.0.0.1:9092")
	Namespace         string              // prefixes every topic and group; default "sluice"
	ClientID          string              // default "sluice"
	Version           sarama.KafkaVersion // at least 0.11 for the idempotent producer; default 2.8.0
	Partitions        int32               // of the topics the adapter creates; default 4
	ReplicationFactor int16               // of the topics the adapter creates; default 1
	// NoCreateTopics stops the adapter from creating missing topics (and
	// dead-letter topics) itself.
	NoCreateTopics bool
	StartFrom      StartPosition // where a new group starts on a partition; default StartNewest
	// DisableIdempotence turns the idempotent producer off, for brokers
	// that refuse InitProducerId. acks=all is always on.
	DisableIdempotence bool

	SessionTimeout    time.Duration // consumer-group session; default 10s
	HeartbeatInterval time.Duration // a rebalance is noticed within one; default 1s
	RebalanceTimeout  time.Duration // default 10s
	// CommitInterval is how often a subscription commits the offsets its
	// acknowledgements recorded (an Ack does not wait for the commit); a
	// crash redelivers what was recorded in the last interval. Default
	// 100ms. CommitThreshold commits at once when that many were recorded
	// since the last commit (default 1000); CommitRetry paces the retries
	// of Flush and of rejoining a failed group session (default 200ms).
	CommitInterval  time.Duration
	CommitThreshold int
	CommitRetry     time.Duration
	// Buffer bounds the records a subscription has pulled and not handed
	// out (waiting behind an unsettled record of their key, or for the next
	// Receive), as a multiple of SubscriptionSpec.InFlight. Default 4.
	Buffer int

	// Existing adopts topics and consumer groups that exist already under
	// their own names (see Existing).
	Existing *Existing
	// MaxMessageBytes bounds a record as sarama counts it (payload, key,
	// headers — sluice's envelope included — and the record overhead).
	// Default DefaultMaxMessageBytes, below sarama's
	// Producer.MaxMessageBytes (1 MiB) and the broker's message.max.bytes;
	// raise it only with both of those.
	MaxMessageBytes int

	Logger *slog.Logger // default slog.Default()
	// TLS, when set, connects with TLS (RootCAs, Certificates for mutual
	// TLS, ServerName when the certificates name another host).
	TLS  *tls.Config
	SASL SASL // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; default none
	// Sarama, when set, is called on each sarama configuration the adapter
	// builds, after its own settings. It must not turn off acks=all or
	// Return.Successes.
	Sarama func(*sarama.Config)
}

func (c Options) withDefaults() Options {
	c.Namespace = cmp.Or(c.Namespace, "sluice")
	c.ClientID = cmp.Or(c.ClientID, "sluice")
	if c.Version == (sarama.KafkaVersion{}) {
		c.Version = sarama.V2_8_0_0
	}
	c.Partitions = cmp.Or(max(c.Partitions, 0), 4)
	c.ReplicationFactor = cmp.Or(max(c.ReplicationFactor, 0), 1)
	c.SessionTimeout = cmp.Or(max(c.SessionTimeout, 0), 10*time.Second)
	c.HeartbeatInterval = cmp.Or(max(c.HeartbeatInterval, 0), time.Second)
	c.RebalanceTimeout = cmp.Or(max(c.RebalanceTimeout, 0), 10*time.Second)
	c.CommitRetry = cmp.Or(max(c.CommitRetry, 0), 200*time.Millisecond)
	c.CommitInterval = cmp.Or(max(c.CommitInterval, 0), 100*time.Millisecond)
	c.CommitThreshold = cmp.Or(max(c.CommitThreshold, 0), 1000)
	c.Buffer = cmp.Or(max(c.Buffer, 0), 4)
	c.MaxMessageBytes = cmp.Or(max(c.MaxMessageBytes, 0), DefaultMaxMessageBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Options) validate() error {
	invalid := func(field, reason string) error {
		return &ports.ValueError{Field: "kafka.Options." + field, Reason: reason}
	}
	if err := c.Existing.validate(); err != nil {
		return err
	}
	if p := c.producerConfig().Producer.MaxMessageBytes; c.MaxMessageBytes > p {
		return invalid("MaxMessageBytes", fmt.Sprintf("%d is above the producer's Producer.MaxMessageBytes %d: raise that too (Options.Sarama), and the broker's message.max.bytes", c.MaxMessageBytes, p))
	}
	if len(c.Brokers) == 0 {
		return invalid("Brokers", "is required")
	}
	if err := ports.Topic(c.Namespace).Validate(); err != nil {
		return invalid("Namespace", err.Error())
	}
	if !c.DisableIdempotence && !c.Version.IsAtLeast(sarama.V0_11_0_0) {
		return invalid("Version", "must be at least 0.11 for the idempotent producer")
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return invalid("HeartbeatInterval", "must be shorter than SessionTimeout")
	}
	return c.SASL.validate()
}

// config is the sarama configuration of one client: the shared settings,
// then kind's (producer: acks=all, idempotent where allowed, successes
// returned; consumer: no auto-commit, the group timing of Options), then
// Options.Sarama.
func (c Options) config(kind string, inFlight int) *sarama.Config {
	s := sarama.NewConfig()
	s.ClientID, s.Version = c.ClientID, c.Version
	s.Metadata.Retry.Backoff = 50 * time.Millisecond
	s.Net.DialTimeout, s.Net.ReadTimeout, s.Net.WriteTimeout = 5*time.Second, 10*time.Second, 10*time.Second
	c.applySecurity(s)
	switch kind {
	case "producer":
		s.Producer.RequiredAcks = sarama.WaitForAll
		s.Producer.Return.Successes, s.Producer.Return.Errors = true, true
		s.Producer.Retry.Max, s.Producer.Retry.Backoff = 5, 50*time.Millisecond
		s.Producer.Partitioner = sarama.NewHashPartitioner
		if !c.DisableIdempotence {
			s.Producer.Idempotent, s.Net.MaxOpenRequests = true, 1
		}
	case "consumer":
		s.Consumer.Offsets.AutoCommit.Enable = false
		s.Consumer.Offsets.Initial = sarama.OffsetNewest
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

func (c Options) producerConfig() *sarama.Config { return c.config("producer", 0) }
