package kafkawire

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Franz is how an adapter's franz-go client connects and produces: the
// kafkaqueue adapter's clients and the kafka adapter's producers map their
// options alike. Records are produced with acks=all, and the records of
// one Produce (or ProduceSync) call go out together: one batch per
// partition (see Linger).
type Franz struct {
	Brokers  []string // the seed brokers
	ClientID string
	TLS      *tls.Config // nil: plaintext
	// Mechanism (as ParseMechanism reads it; "plain" when empty), User and
	// Password authenticate by SASL; a User turns it on.
	Mechanism, User, Password string
	// Dial, when not nil, opens each connection (TLS is then set up over
	// it); nil: franz-go's dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DeliveryTimeout bounds how long a produced record may wait for the
	// brokers' acknowledgement, retries included, before it fails (it may
	// still have been stored); 0: DefaultDeliveryTimeout; at least 1s
	// (franz-go's floor). A caller's ctx ends the wait earlier. Without a
	// bound franz-go retries a record until its ctx is done: a Send with
	// a context that never ends would hang while the brokers are
	// unreachable.
	DeliveryTimeout time.Duration
	// MaxMessageBytes, when positive, is the largest record the adapter
	// lets through (envelope included): a produce batch may hold it.
	MaxMessageBytes int
	// Compression is the codec of the batches produced: "none" (or ""),
	// "snappy", "lz4", "zstd" or "gzip". A codec other than none
	// compresses a batch only when that makes it smaller (franz-go).
	Compression string
}

// Compressions names the words Franz.Compression takes, for errors.
const Compressions = "none, snappy, lz4, zstd or gzip"

// IsCompression reports whether word is one Franz.Compression takes.
func IsCompression(word string) bool {
	_, err := Franz{Compression: word}.codec()
	return err == nil
}

// codec returns the batch compression of f.Compression.
func (f Franz) codec() (kgo.CompressionCodec, error) {
	switch f.Compression {
	case "", "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("Compression %q is not %s", f.Compression, Compressions)
}

// Linger is how long a partition's records may wait for more before
// franz-go sends them. It holds no Produce call: ProduceSync, which
// Produce and the transactional producers use, ends the wait of the
// partitions it wrote to once it has handed over all its records, so a
// call's records share one batch per partition (with no linger the first
// record of a call goes out alone and the rest in a second batch: up to
// twice the batches, which every consumer and the broker pay for). Only the
// first records to a topic whose partitions the client does not know yet
// wait for it, once.
const Linger = 5 * time.Millisecond

// DefaultDeliveryTimeout is Franz.DeliveryTimeout's default.
const DefaultDeliveryTimeout = 30 * time.Second

// Opts returns the franz-go options of f. A mechanism or a password
// without a user is refused, as an unknown mechanism is.
func (f Franz) Opts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(f.Brokers...), kgo.ClientID(f.ClientID), kgo.RecordDeliveryTimeout(cmp.Or(f.DeliveryTimeout, DefaultDeliveryTimeout)),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(Linger), kgo.WithHooks(confirmHook{})}
	if f.MaxMessageBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(f.MaxMessageBytes)+4096))
	}
	switch {
	case f.Dial != nil && f.TLS != nil:
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := f.Dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conf := f.TLS.Clone()
			if conf.ServerName == "" {
				conf.ServerName, _, _ = net.SplitHostPort(addr)
			}
			return tls.Client(c, conf), nil
		}))
	case f.Dial != nil:
		opts = append(opts, kgo.Dialer(f.Dial))
	case f.TLS != nil:
		opts = append(opts, kgo.DialTLSConfig(f.TLS))
	}
	codec, cerr := f.codec()
	codecs := []kgo.CompressionCodec{codec}
	if codec != kgo.NoCompression() {
		codecs = append(codecs, kgo.NoCompression()) // for a broker that refuses the codec
	}
	opts = append(opts, kgo.ProducerBatchCompression(codecs...))
	m, err := f.mechanism()
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, cmp.Or(cerr, err)
}

// mechanism is the SASL mechanism of f, nil without a user.
func (f Franz) mechanism() (sasl.Mechanism, error) {
	if f.User == "" {
		if f.Mechanism != "" || f.Password != "" {
			return nil, errors.New("SASL.User is required when a SASL mechanism or password is given")
		}
		return nil, nil
	}
	m, err := ParseMechanism(cmp.Or(f.Mechanism, "plain"))
	switch {
	case err != nil:
		return nil, err
	case m == "SCRAM-SHA-256":
		return scram.Auth{User: f.User, Pass: f.Password}.AsSha256Mechanism(), nil
	case m == "SCRAM-SHA-512":
		return scram.Auth{User: f.User, Pass: f.Password}.AsSha512Mechanism(), nil
	}
	return plain.Auth{User: f.User, Pass: f.Password}.AsMechanism(), nil
}
