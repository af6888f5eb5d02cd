package kafka

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// StartPosition is where a consumer group starts on a partition it has
// never committed an offset for.
type StartPosition int

const (
	// StartNewest starts at the end of the partition: messages sent before
	// the group first joined are not delivered to it (the default).
	StartNewest StartPosition = iota
	// StartOldest starts at the oldest retained message.
	StartOldest
)

// Options configures an [Adapter]. The zero value of every optional field is
// a documented default; Brokers is required.
type Options struct {
	// Brokers are the bootstrap addresses ("127.0.0.1:9092"). Required.
	Brokers []string
	// Namespace prefixes every physical topic and group name. Default
	// "sluice".
	Namespace string
	// ClientID is sent to the brokers. Default "sluice".
	ClientID string
	// Version is the Kafka protocol version sarama speaks. It must be at
	// least 0.11 for the idempotent producer. Default 2.8.0.
	Version sarama.KafkaVersion
	// Partitions is the partition count of topics the adapter creates.
	// Default 4.
	Partitions int32
	// ReplicationFactor of topics the adapter creates. Default 1.
	ReplicationFactor int16
	// NoCreateTopics stops the adapter from creating missing topics (and
	// dead-letter topics) itself. Default false: it creates them.
	NoCreateTopics bool
	// StartFrom is where a new group starts on a partition. Default
	// StartNewest.
	StartFrom StartPosition
	// DisableIdempotence turns the idempotent producer off, for brokers
	// that refuse InitProducerId. Default false: the producer is
	// idempotent. acks=all is always on.
	DisableIdempotence bool

	// SessionTimeout is the consumer-group session timeout. Default 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is the consumer-group heartbeat interval; a
	// rebalance is noticed within one interval. Default 1s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds how long the group waits for members to
	// rejoin in a rebalance. Default 10s.
	RebalanceTimeout time.Duration
	// CommitRetry is how often FlushAcks retries a failed commit.
	// Default 200ms.
	CommitRetry time.Duration
	// CommitInterval is how often a subscription commits the offsets that
	// its acknowledgements recorded (an Ack returns once the offset is
	// recorded; it does not wait for the commit). A crash loses at most
	// the offsets recorded in the last interval: their messages are
	// redelivered, never lost. Default 100ms.
	CommitInterval time.Duration
	// CommitThreshold starts a commit round at once, before the interval
	// is up, when that many offsets were recorded since the last round.
	// Default 1000.
	CommitThreshold int
	// Rejoin is the backoff between attempts to rejoin the consumer group
	// after a session failed (the broker unreachable, the group
	// coordinator moving). Default: kit.DefaultBackoff started at
	// CommitRetry (200ms, doubling, at most 30s, 20% jitter).
	Rejoin kit.Backoff
	// Buffer bounds the records a subscription holds back because an
	// earlier record of their key is still unsettled, as a multiple of
	// SubscriptionSpec.InFlight; while it is full no more records are
	// read. Default 4.
	Buffer int

	// Existing adopts topics and consumer groups that exist already under
	// their own names (see Existing). Default: none.
	Existing *Existing
	// MaxMessageBytes bounds a record as sarama counts it
	// (ProducerMessage.ByteSize: payload, key, headers — sluice's envelope
	// included — and the record overhead); a larger message fails Send
	// with a *ports.SizeError before anything is sent. Default 1,000,000
	// (DefaultMaxMessageBytes), below both sarama's Producer.MaxMessageBytes
	// (1 MiB) and the broker's message.max.bytes default (1,048,588 for a
	// record batch). Raise it only with both of those.
	MaxMessageBytes int

	// Logger receives the adapter's notes (a fallback said at Subscribe).
	// Default slog.Default().
	Logger *slog.Logger
	// TLS, when set, connects to the brokers with TLS using this
	// configuration (RootCAs to trust them, Certificates for mutual TLS,
	// ServerName when the brokers' certificates name another host). The
	// kafka+tls:// opener builds it from ca_file, cert_file, key_file,
	// server_name and insecure. Default: plaintext.
	TLS *tls.Config
	// SASL authenticates the connections (PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512). Default: none.
	SASL SASL

	// Sarama, when set, is called on each sarama configuration the adapter
	// builds (producer, consumer, admin) after its own settings, for TLS,
	// SASL and tuning. It must not turn off acks=all or Return.Successes.
	Sarama func(*sarama.Config)
}

// ParseURL parses "kafka://host:port[,host:port...][/namespace]" into a
// Options with the other fields left to their defaults.
func ParseURL(raw string) (Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Options{}, fmt.Errorf("%w: kafka url: %v", ports.ErrInvalid, err)
	}
	if u.Scheme != "kafka" {
		return Options{}, &ports.ValueError{Field: "url", Reason: fmt.Sprintf("scheme %q is not kafka", u.Scheme)}
	}
	var c Options
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			c.Brokers = append(c.Brokers, h)
		}
	}
	c.Namespace = strings.Trim(u.Path, "/")
	return c, c.withDefaults().validate()
}

func (c Options) withDefaults() Options {
	if c.Namespace == "" {
		c.Namespace = "sluice"
	}
	if c.ClientID == "" {
		c.ClientID = "sluice"
	}
	if c.Version == (sarama.KafkaVersion{}) {
		c.Version = sarama.V2_8_0_0
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.ReplicationFactor <= 0 {
		c.ReplicationFactor = 1
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = 10 * time.Second
	}
	if c.CommitRetry <= 0 {
		c.CommitRetry = 200 * time.Millisecond
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.CommitThreshold <= 0 {
		c.CommitThreshold = 1000
	}
	if c.Rejoin == (kit.Backoff{}) {
		c.Rejoin = kit.DefaultBackoff
		c.Rejoin.Initial = c.CommitRetry
	}
	if c.Buffer <= 0 {
		c.Buffer = 4
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes.
const DefaultMaxMessageBytes = 1_000_000

func (c Options) validate() error {
	if err := c.Existing.validate(); err != nil {
		return err
	}
	if p := c.producerConfig().Producer.MaxMessageBytes; c.MaxMessageBytes > p {
		return &ports.ValueError{Field: "kafka.Options.MaxMessageBytes", Reason: fmt.Sprintf("%d is above the producer's Producer.MaxMessageBytes %d: raise that too (Options.Sarama), and the broker's message.max.bytes", c.MaxMessageBytes, p)}
	}
	if len(c.Brokers) == 0 {
		return &ports.ValueError{Field: "kafka.Options.Brokers", Reason: "is required"}
	}
	if err := ports.Topic(c.Namespace).Validate(); err != nil {
		return &ports.ValueError{Field: "kafka.Options.Namespace", Reason: err.Error()}
	}
	if !c.DisableIdempotence && !c.Version.IsAtLeast(sarama.V0_11_0_0) {
		return &ports.ValueError{Field: "kafka.Options.Version", Reason: "must be at least 0.11 for the idempotent producer"}
	}
	if err := c.SASL.validate(); err != nil {
		return err
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return &ports.ValueError{Field: "kafka.Options.HeartbeatInterval", Reason: "must be shorter than SessionTimeout"}
	}
	return nil
}

// base is the sarama configuration shared by every client.
func (c Options) base() *sarama.Config {
	s := sarama.NewConfig()
	s.ClientID = c.ClientID
	s.Version = c.Version
	s.Metadata.Retry.Backoff = 50 * time.Millisecond
	s.Net.DialTimeout = 5 * time.Second
	s.Net.ReadTimeout = 10 * time.Second
	s.Net.WriteTimeout = 10 * time.Second
	c.applySecurity(s)
	return s
}

// producerConfig: acks=all, idempotent where allowed, successes returned.
func (c Options) producerConfig() *sarama.Config {
	s := c.base()
	s.Producer.RequiredAcks = sarama.WaitForAll
	s.Producer.Return.Successes = true
	s.Producer.Return.Errors = true
	s.Producer.Retry.Max = 5
	s.Producer.Retry.Backoff = 50 * time.Millisecond
	s.Producer.Partitioner = sarama.NewHashPartitioner
	if !c.DisableIdempotence {
		s.Producer.Idempotent = true
		s.Net.MaxOpenRequests = 1
	}
	c.user(s)
	return s
}

// consumerConfig: no auto-commit (the subscription commits), fast group
// timing from Options; partition errors are logged by sarama and session
// errors returned by Consume.
func (c Options) consumerConfig(inFlight int) *sarama.Config {
	s := c.base()
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
	c.user(s)
	return s
}

func (c Options) adminConfig() *sarama.Config {
	s := c.base()
	c.user(s)
	return s
}

func (c Options) user(s *sarama.Config) {
	if c.Sarama != nil {
		c.Sarama(s)
	}
}
