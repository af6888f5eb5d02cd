package rocketmq

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Defaults of the adapter.
const (
	// DefaultInvisibleDuration is how long a received message stays
	// invisible to the rest of its group before RocketMQ delivers it again
	// (the redelivery of an unsettled message after a crash). A handler
	// must settle within it. Apache RocketMQ's proxy refuses receives with
	// less than 10 s.
	DefaultInvisibleDuration = 30 * time.Second
	// DefaultMaxLease bounds how long a received, unsettled message is
	// kept invisible by renewing its invisible duration (WithMaxLease).
	DefaultMaxLease = 30 * time.Minute
	// DefaultAwaitDuration is the long-polling time of one ReceiveMessage.
	DefaultAwaitDuration = 5 * time.Second
	// DefaultRequestTimeout bounds every other RPC (send, ack, change).
	DefaultRequestTimeout = 5 * time.Second
	// DefaultParallelism bounds the concurrent RPCs of one Send or Settle
	// call: the v5 client sends one message and acks one receipt handle
	// per RPC.
	DefaultParallelism = 32
	// MaxNameLength is RocketMQ's limit on topic names (127 characters).
	MaxNameLength = 127
)

// Option configures an Adapter.
type Option func(*config) error

type config struct {
	endpoint       string
	namespace      string
	accessKey      string
	accessSecret   string
	invisible      time.Duration
	maxLease       time.Duration
	await          time.Duration
	requestTimeout time.Duration
	parallelism    int
	logger         *slog.Logger
	startTimeout   time.Duration
	sendAttempts   int32
	existing       map[ports.Topic]existing // WithExisting
}

func defaultConfig() config {
	return config{
		invisible:      DefaultInvisibleDuration,
		maxLease:       DefaultMaxLease,
		await:          DefaultAwaitDuration,
		requestTimeout: DefaultRequestTimeout,
		parallelism:    DefaultParallelism,
		logger:         slog.New(slog.DiscardHandler),
		startTimeout:   30 * time.Second,
		sendAttempts:   3,
	}
}

// WithEndpoint sets the RocketMQ 5 proxy's gRPC endpoint, "host:port"
// (required; the proxy's default gRPC port is 8081).
func WithEndpoint(hostport string) Option {
	return func(c *config) error {
		if hostport == "" {
			return errors.New("rocketmq: WithEndpoint needs a host:port, e.g. 127.0.0.1:8081")
		}
		c.endpoint = hostport
		return nil
	}
}

// WithNamespace sets the RocketMQ namespace (Config.NameSpace) of every
// topic and group.
func WithNamespace(ns string) Option { return func(c *config) error { c.namespace = ns; return nil } }

// WithCredentials sets the access key and secret the client signs its
// requests with (RocketMQ ACL).
func WithCredentials(accessKey, accessSecret string) Option {
	return func(c *config) error { c.accessKey, c.accessSecret = accessKey, accessSecret; return nil }
}

// WithInvisibleDuration sets how long a received message stays invisible
// before it is redelivered unless settled or renewed (default 30 s; Apache
// RocketMQ requires at least 10 s). While a message is in flight the
// adapter renews its invisibility, up to WithMaxLease; a consumer that
// crashes leaves its messages to be redelivered after at most this long.
func WithInvisibleDuration(d time.Duration) Option {
	return positive("WithInvisibleDuration", d, func(c *config) { c.invisible = d })
}

// WithMaxLease bounds how long the adapter keeps a received message
// invisible while the pipeline works on it (default 30 min). A message
// not settled when its invisible duration is about to end has that
// duration renewed (ChangeInvisibleDuration, the same receipt's delivery,
// DeliveryAttempt unchanged), so a handler that runs longer than the
// invisible duration does not get its message delivered to another
// consumer meanwhile. Past d after it was received a message is no longer
// renewed: it is delivered again when its invisibility ends. Zero turns
// renewal off: every message must be settled within the invisible
// duration or it is delivered again.
func WithMaxLease(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("rocketmq: WithMaxLease(%v): must not be negative (0 turns lease renewal off)", d)
		}
		c.maxLease = d
		return nil
	}
}

// WithAwaitDuration sets the long-polling time of a receive (default 5 s).
func WithAwaitDuration(d time.Duration) Option {
	return positive("WithAwaitDuration", d, func(c *config) { c.await = d })
}

// WithRequestTimeout bounds each RPC other than receive (default 5 s).
func WithRequestTimeout(d time.Duration) Option {
	return positive("WithRequestTimeout", d, func(c *config) { c.requestTimeout = d })
}

// WithStartTimeout bounds how long starting a producer or consumer may take
// (the client waits for the proxy's settings; default 30 s).
func WithStartTimeout(d time.Duration) Option {
	return positive("WithStartTimeout", d, func(c *config) { c.startTimeout = d })
}

// WithParallelism bounds the concurrent RPCs of one Send or Settle call
// (default 32).
func WithParallelism(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("rocketmq: WithParallelism(%d): must be at least 1", n)
		}
		c.parallelism = n
		return nil
	}
}

// WithSendAttempts sets how many times the client tries one send before
// reporting the failure (default 3, the client's own default).
func WithSendAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("rocketmq: WithSendAttempts(%d): must be at least 1", n)
		}
		c.sendAttempts = int32(n)
		return nil
	}
}

// WithLogger sets where the adapter logs (default: nowhere).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l != nil {
			c.logger = l
		}
		return nil
	}
}

func positive(name string, d time.Duration, set func(*config)) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("rocketmq: %s(%v): must be positive", name, d)
		}
		set(c)
		return nil
	}
}
