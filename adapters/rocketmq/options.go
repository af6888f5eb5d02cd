package rocketmq

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Defaults of [Options].
const (
	// DefaultInvisibleDuration is how long a received message stays
	// invisible to the rest of its group before RocketMQ delivers it again
	// (the redelivery of an unsettled message after a crash). Apache
	// RocketMQ's proxy refuses receives with less than 10 s.
	DefaultInvisibleDuration = 30 * time.Second
	// DefaultMaxLease bounds how long a received, unsettled message is
	// kept invisible by renewing its invisible duration (Options.MaxLease).
	DefaultMaxLease = 30 * time.Minute
	// DefaultAwaitDuration is the long-polling time of one ReceiveMessage.
	DefaultAwaitDuration = 5 * time.Second
	// DefaultRequestTimeout bounds every other RPC (send, ack, change).
	DefaultRequestTimeout = 5 * time.Second
	// DefaultStartTimeout bounds the start of a producer or consumer.
	DefaultStartTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds New's signed check call.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultParallelism bounds the concurrent RPCs of one send batch or
	// settlement round: the v5 client sends one message and acks one
	// receipt handle per RPC.
	DefaultParallelism = 32
	// DefaultSendAttempts is the client's own number of tries per send.
	DefaultSendAttempts = 3
	// DefaultDeliveryLimit is RocketMQ's default: the first delivery and 16 retries.
	DefaultDeliveryLimit = 17
	// MaxNameLength is RocketMQ's limit on topic names (127 characters).
	MaxNameLength = 127
)

// Options configure an [Adapter]. Only Endpoint is required; a zero field
// takes its default.
type Options struct {
	// Endpoint is the RocketMQ 5 proxy's gRPC endpoint, "host:port" (the
	// proxy's default gRPC port is 8081).
	Endpoint string
	// Namespace is the RocketMQ namespace (Config.NameSpace) of every
	// topic and group.
	Namespace string
	// AccessKey and AccessSecret sign every request (RocketMQ ACL). The
	// secret is removed from every error the adapter returns.
	AccessKey, AccessSecret string
	// InvisibleDuration is how long a received message stays invisible
	// before it is redelivered unless settled or renewed (default 30 s;
	// Apache RocketMQ requires at least 10 s). A consumer that crashes
	// leaves its messages to be redelivered after at most this long.
	InvisibleDuration time.Duration `url:"invisible,1s..12h"`
	// MaxLease bounds how long the adapter keeps a received message
	// invisible while the pipeline works on it (default 30 min). A
	// message not settled when its invisible duration is about to end has
	// that duration renewed (ChangeInvisibleDuration, the same delivery,
	// DeliveryAttempt unchanged), so a handler that runs longer than the
	// invisible duration does not get its message delivered to another
	// consumer meanwhile. Past MaxLease after it was received a message is
	// no longer renewed: it is delivered again when its invisibility ends.
	// A negative MaxLease turns renewal off: every message must then be
	// settled within the invisible duration.
	MaxLease time.Duration
	// AwaitDuration is the long-polling time of a receive (default 5 s).
	AwaitDuration time.Duration `url:"await,100ms..1m"`
	// RequestTimeout bounds each RPC other than receive (default 5 s).
	RequestTimeout time.Duration `url:"request_timeout,100ms..5m"`
	// StartTimeout bounds how long starting a producer or consumer may take
	// (the client waits for the proxy's settings; default 30 s).
	StartTimeout time.Duration `url:"start_timeout,1s..10m"`
	// ConnectTimeout bounds New's signed check call (default 10 s).
	ConnectTimeout time.Duration `url:"connect_timeout,10ms..1h"`
	// Parallelism bounds the concurrent RPCs of one send batch or
	// settlement round (default 32).
	Parallelism int
	// SendAttempts is how many times the client tries one send before
	// reporting the failure (default 3, the client's own default).
	SendAttempts int
	// DeliveryLimit: deliveries before %DLQ%<group>; a requeue at it is a copy (default 17).
	DeliveryLimit int `url:"delivery_limit,1..1000"`
	// Existing adopts names other programs already use (see [Existing]).
	Existing []Existing
	// Logger receives the adapter's log lines. Default: slog.Default().
	Logger *slog.Logger
}

// Existing adopts RocketMQ names other programs already use for the
// logical topic Topic: Send and subscriptions use the RocketMQ topic As as
// it is, and a LoadBalance group listed in Groups (logical group →
// existing consumer group) consumes as that consumer group, so a service
// moving to sluice keeps every name byte for byte. Nothing is created: the
// topic and groups are an administrator's. Groups not listed keep their
// own names. The dead-letter topic "<Topic>.dlq" stays derived.
type Existing struct {
	Topic  ports.Topic
	As     string
	Groups map[string]string
}

// withDefaults validates o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.Endpoint == "" {
		return o, invalid("Endpoint", "is required: the proxy's gRPC host:port, e.g. 127.0.0.1:8081")
	}
	if o.MaxLease == 0 {
		o.MaxLease = DefaultMaxLease
	}
	if err := errors.Join(
		orDefault("InvisibleDuration", &o.InvisibleDuration, DefaultInvisibleDuration),
		orDefault("AwaitDuration", &o.AwaitDuration, DefaultAwaitDuration),
		orDefault("RequestTimeout", &o.RequestTimeout, DefaultRequestTimeout),
		orDefault("StartTimeout", &o.StartTimeout, DefaultStartTimeout),
		orDefault("ConnectTimeout", &o.ConnectTimeout, DefaultConnectTimeout),
		orDefault("Parallelism", &o.Parallelism, DefaultParallelism),
		orDefault("SendAttempts", &o.SendAttempts, DefaultSendAttempts),
		orDefault("DeliveryLimit", &o.DeliveryLimit, DefaultDeliveryLimit),
	); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, o.checkExisting()
}

// checkExisting refuses an adoption RocketMQ cannot hold or that maps two
// logical topics to one RocketMQ topic.
func (o Options) checkExisting() error {
	seen := map[ports.Topic]bool{}
	physical := map[string]ports.Topic{}
	for _, e := range o.Existing {
		if err := e.Topic.Validate(); err != nil {
			return invalid("Existing", err.Error())
		}
		if err := rocketName("existing topic", e.As); err != nil {
			return err
		}
		if seen[e.Topic] {
			return invalid("Existing", fmt.Sprintf("adopts %q twice", e.Topic))
		}
		if other, dup := physical[e.As]; dup {
			return invalid("Existing", fmt.Sprintf("%q is already the topic of %q", e.As, other))
		}
		seen[e.Topic], physical[e.As] = true, e.Topic
		for _, g := range e.Groups {
			if err := rocketName("existing consumer group", g); err != nil {
				return err
			}
		}
	}
	return nil
}

// orDefault sets a zero *v to def and refuses a negative one.
func orDefault[T int | time.Duration](name string, v *T, def T) error {
	if *v < 0 {
		return invalid(name, fmt.Sprintf("is %v: must be positive (zero for the default)", *v))
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

func invalid(field, reason string) error {
	return &ports.ValueError{Field: "rocketmq.Options." + field, Reason: reason}
}
