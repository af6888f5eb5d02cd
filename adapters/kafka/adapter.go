package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Kafka implementation of ports.Adapter. It holds one
// client with an idempotent acks=all producer for Send, requeues and dead
// letters, and one consumer-group client per subscription.
type Adapter struct {
	cfg   Config
	names names

	client sarama.Client
	prod   *producer
	admin  sarama.ClusterAdmin

	declared kit.Declared // topics declared with DeclareTopic

	topicsMu sync.Mutex
	topics   map[string]bool // physical topics known to exist

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

var _ ports.Adapter = (*Adapter)(nil)

// New connects to cfg.Brokers and returns a ready adapter. ctx bounds the
// connection.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	type result struct {
		a   *Adapter
		err error
	}
	ch := make(chan result, 1)
	go func() { // sarama has no context: dial in the background
		a, err := connect(cfg)
		ch <- result{a, err}
	}()
	select {
	case r := <-ch:
		return r.a, r.err
	case <-ctx.Done():
		go func() { // close what the abandoned dial returns
			if r := <-ch; r.a != nil {
				_ = r.a.Close(context.Background())
			}
		}()
		return nil, ctx.Err()
	}
}

func connect(cfg Config) (*Adapter, error) {
	if err := cfg.preflight(cfg.base().Net.DialTimeout); err != nil {
		return nil, fmt.Errorf("kafka: connect: %w", err)
	}
	client, err := sarama.NewClient(cfg.Brokers, cfg.producerConfig())
	if err != nil {
		return nil, fmt.Errorf("kafka: connect: %w", cfg.explainConnect(err))
	}
	prod, err := newProducer(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: producer: %w", err)
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, cfg.adminConfig())
	if err != nil {
		_ = prod.close()
		_ = client.Close()
		return nil, fmt.Errorf("kafka: admin: %w", cfg.explainConnect(err))
	}
	if err := cfg.Existing.check(admin); err != nil {
		_ = admin.Close()
		_ = prod.close()
		_ = client.Close()
		return nil, err
	}
	return &Adapter{
		cfg: cfg, names: names{ns: cfg.Namespace, existing: cfg.Existing},
		client: client, prod: prod, admin: admin,
		topics: make(map[string]bool),
		subs:   make(map[*subscription]struct{}),
	}, nil
}

// Name returns "kafka".
func (a *Adapter) Name() string { return "kafka" }

// Capabilities: confirmed sends, per-message settlement with prefix
// commits, poll batches, broadcast through per-instance groups and durable
// groups. Delay, delayed requeue and dead letters are not native: the
// adapter applies the local-scheduler and "<topic>.dlq" fallbacks itself.
// Redelivery counts are a lower bound (a crash before commit redelivers
// without counting) and ordering is none (see the package doc).
//
// Of the topic properties: a new group can start at the oldest retained
// offset (StartEarliest), retention is the topic's retention.ms (set when
// DeclareTopic creates it; records older than it are also skipped at
// consumption, since Kafka deletes whole segments only at its retention
// check), a single-active group is a sticky one-member assignment (see
// singleActive). Kafka has no count cap
// (MaxLength) and no weaker delivery class: BestEffort falls back to
// at-least-once, said at Subscribe. MaxMessageBytes is
// Config.MaxMessageBytes and counts the envelope.
func (a *Adapter) Capabilities() ports.Capabilities {
	max := a.cfg.MaxMessageBytes
	if max == 0 {
		max = DefaultMaxMessageBytes // the zero Adapter
	}
	return ports.Capabilities{
		Broadcast:          true,
		PerMessageAck:      true,
		PublisherConfirm:   true,
		NativeBatch:        true,
		DurableGroups:      true,
		Ordering:           ports.OrderNone,
		StartEarliest:      true,
		SingleActive:       true,
		BestEffort:         false,
		Retention:          true,
		MaxLength:          false,
		MaxMessageBytes:    max,
		SizeCountsEnvelope: true,
		// Detected at Subscribe from the instance's group members
		// (instance.go): refused, though not atomically.
		InstanceGuard: ports.InstanceRefused,
	}
}

// Send publishes msgs with acks=all and returns when every one is
// confirmed (see ports.Sender). A message with Delay is stored at once and
// held by the consuming adapter until its time.
//
// With a ctx that is already done Send publishes nothing and names every
// message in the error (each wraps ctx.Err()). When ctx ends midway, the
// messages whose acks arrived are confirmed (not named); each one named
// wraps ctx.Err() and may or may not have been stored by the broker.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		errs := make([]error, len(msgs))
		for i := range msgs {
			errs[i] = &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: fmt.Errorf("kafka: not sent (nothing published): %w", err)}
		}
		return errors.Join(errs...)
	}
	var errs []error
	pms := make([]*sarama.ProducerMessage, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	now := time.Now()
	for i := range msgs {
		m := msgs[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		phys := a.names.topic(m.Topic)
		m.Stamp(now)
		var nb time.Time
		if m.Delay > 0 {
			nb = now.Add(m.Delay)
		}
		pm := producerMessage(phys, &m, nb)
		if err := checkSize(&m, pm, a.cfg.MaxMessageBytes); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		if err := a.ensureTopic(ctx, phys); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		pms = append(pms, pm)
		idx = append(idx, i)
	}
	for j, err := range a.prod.publish(ctx, pms) {
		if err != nil {
			errs = append(errs, &ports.SendError{Index: idx[j], Topic: msgs[idx[j]].Topic, Err: unconfirmed(err)})
		}
	}
	return errors.Join(errs...)
}

// unconfirmed wraps a producer error in ports.ErrUnconfirmed (context and
// closed errors are returned as they are).
func unconfirmed(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ports.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
}

// ensureTopic creates phys (unless NoCreateTopics) and waits until the
// client's metadata knows it.
func (a *Adapter) ensureTopic(ctx context.Context, phys string) error {
	a.topicsMu.Lock()
	known := a.topics[phys]
	a.topicsMu.Unlock()
	if known {
		return nil
	}
	if !a.cfg.NoCreateTopics && !a.cfg.Existing.adopted(phys) {
		err := a.admin.CreateTopic(phys, &sarama.TopicDetail{NumPartitions: a.cfg.Partitions, ReplicationFactor: a.cfg.ReplicationFactor}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %s: %w", phys, err)
		}
	}
	for {
		err := a.client.RefreshMetadata(phys)
		if err == nil {
			if ps, perr := a.client.Partitions(phys); perr == nil && len(ps) > 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topic %s not ready: %w", phys, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	a.topicsMu.Lock()
	a.topics[phys] = true
	a.topicsMu.Unlock()
	return nil
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Close stops every subscription, flushes the producer and closes the
// clients. It is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		var es []error
		es = append(es, a.prod.close(), a.admin.Close(), a.client.Close())
		done <- errors.Join(es...)
	}()
	select {
	case err := <-done:
		errs = append(errs, err)
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

func (a *Adapter) forget(s *subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}
