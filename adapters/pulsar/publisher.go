package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// PublisherConfig configures a Publisher. The zero value is usable.
type PublisherConfig struct {
	// SendTimeout bounds the wait for a publish receipt
	// (ProducerOptions.SendTimeout). Default DefaultSendTimeout (30s).
	SendTimeout time.Duration
	// Chunking splits a message above the broker's max_message_size into
	// chunks (ProducerOptions.EnableChunking), see WithChunking. Default
	// off: such a message fails.
	Chunking bool
}

// Publisher is a Watermill message.Publisher over a Pulsar client.
//
// Publish returns only after the broker sent a receipt for every message:
// it is a confirmed publish, never fire-and-forget. Producers are created
// lazily, one per topic, with client-side batching off (so each message is
// its own entry and can be acknowledged and negatively acknowledged on its
// own) and kept until Close.
//
// Message mapping: the payload is the Pulsar payload, metadata become
// properties, metadata KeyMetadata becomes the Pulsar message key, and
// Watermill's delay metadata (components/delay.DelayedForKey) becomes
// DeliverAfter plus the NotBeforeProperty guard. The UUID travels as the
// "ce-id" property when the metadata already carry it (the sluice envelope)
// and as UUIDProperty otherwise.
//
// Publisher is safe for concurrent use.
type Publisher struct {
	client pulsarclient.Client
	cfg    PublisherConfig
	logger watermill.LoggerAdapter

	mu        sync.Mutex
	closed    bool
	producers map[string]*producerEntry
	creating  sync.WaitGroup // CreateProducer calls in flight
}

type producerEntry struct {
	ready chan struct{} // closed once p or err is set
	p     pulsarclient.Producer
	err   error
}

// PublishError reports that the message at Index of a Publish call was not
// confirmed. Publish joins one per unconfirmed message with errors.Join.
type PublishError struct {
	Index int
	UUID  string
	Err   error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("publish #%d (%s): %v", e.Index, e.UUID, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// NewPublisher returns a Publisher over client. The caller keeps owning
// client; Close closes only the producers. logger may be nil (no logging).
func NewPublisher(client pulsarclient.Client, cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if client == nil {
		return nil, &ports.ValueError{Field: "pulsar.NewPublisher", Reason: "client must not be nil"}
	}
	if cfg.SendTimeout < 0 {
		return nil, &ports.ValueError{Field: "PublisherConfig.SendTimeout", Reason: "must not be negative"}
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{client: client, cfg: cfg, logger: logger, producers: map[string]*producerEntry{}}, nil
}

// Publish sends msgs to the Pulsar topic (a full name such as
// "persistent://public/default/orders") and waits for every receipt. Each
// message's wait is bounded by its Context(), and the creation of the
// topic's producer by the first message's. It returns nil only if all
// were confirmed; otherwise a *PublishError per unconfirmed message, joined.
// An unconfirmed message may still have been stored: a retry can duplicate.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	errs := p.publish(topic, msgs)
	if errs == nil {
		return nil
	}
	var joined []error
	for i, err := range errs {
		if err != nil {
			joined = append(joined, &PublishError{Index: i, UUID: msgs[i].UUID, Err: err})
		}
	}
	return errors.Join(joined...)
}

// publish returns nil when every message was confirmed, else one error per
// message (nil for the confirmed ones). Unconfirmed receipts wrap
// ports.ErrUnconfirmed; a done context is reported as its error.
func (p *Publisher) publish(topic string, msgs []*message.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	prod, err := p.producer(msgs[0].Context(), topic)
	if err != nil {
		for i := range msgs {
			fail(i, err)
		}
		return errs
	}
	type receipt struct {
		i   int
		err error
	}
	// Buffered for every message, so late receipts never block the client.
	receipts := make(chan receipt, len(msgs))
	sent := make([]bool, len(msgs))
	for i, m := range msgs {
		pm, err := toProducerMessage(m, time.Now())
		if err == nil {
			err = m.Context().Err()
		}
		if err != nil {
			fail(i, err)
			continue
		}
		sent[i] = true
		prod.SendAsync(m.Context(), pm, func(_ pulsarclient.MessageID, _ *pulsarclient.ProducerMessage, err error) {
			receipts <- receipt{i: i, err: err}
		})
	}
	done := make([]bool, len(msgs))
	for i, m := range msgs {
		for sent[i] && !done[i] {
			select {
			case r := <-receipts:
				done[r.i] = true
				if r.err != nil {
					fail(r.i, fmt.Errorf("%w: %w", ports.ErrUnconfirmed, r.err))
				}
			case <-m.Context().Done():
				done[i] = true
				fail(i, m.Context().Err())
			}
		}
	}
	return errs
}

// producer returns the producer of topic, creating it once. The client's
// CreateProducer takes no context, so creation runs in a goroutine the
// Publisher owns and every caller waits for it bounded by ctx. A failed
// creation is not cached, so a later publish tries again.
func (p *Publisher) producer(ctx context.Context, topic string) (pulsarclient.Producer, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ports.ErrClosed
	}
	e, ok := p.producers[topic]
	if !ok {
		e = &producerEntry{ready: make(chan struct{})}
		p.producers[topic] = e
		p.creating.Add(1)
		go func() {
			defer p.creating.Done()
			p.create(topic, e)
		}()
	}
	p.mu.Unlock()
	select {
	case <-e.ready:
		return e.p, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// create makes the producer of entry e and marks it ready.
func (p *Publisher) create(topic string, e *producerEntry) {
	prod, err := p.client.CreateProducer(pulsarclient.ProducerOptions{
		Topic:           topic,
		SendTimeout:     p.cfg.SendTimeout,
		DisableBatching: true, // also required by chunking
		EnableChunking:  p.cfg.Chunking,
	})
	p.mu.Lock()
	switch {
	case err != nil:
		e.err = fmt.Errorf("%w: create producer for %s: %w", ports.ErrUnconfirmed, topic, err)
		if p.producers[topic] == e {
			delete(p.producers, topic)
		}
	case p.closed:
		prod.Close()
		e.err = ports.ErrClosed
	default:
		e.p = prod
	}
	p.mu.Unlock()
	close(e.ready)
}

// Close closes every producer (each waits for its pending sends). It is
// idempotent; Publish returns ports.ErrClosed afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	entries := p.producers
	p.producers = map[string]*producerEntry{}
	p.mu.Unlock()
	p.creating.Wait() // bounded by the client's operation timeout
	for topic, e := range entries {
		<-e.ready
		if e.p != nil {
			e.p.Close()
			p.logger.Debug("pulsar producer closed", watermill.LogFields{"topic": topic})
		}
	}
	return nil
}

var _ message.Publisher = (*Publisher)(nil)
