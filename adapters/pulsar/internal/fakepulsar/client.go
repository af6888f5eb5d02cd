package fakepulsar

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// ErrClientClosed is returned by a closed client and its producers.
var ErrClientClosed = errors.New("fakepulsar: client closed")

// client is one "process" connected to the broker.
type client struct {
	b *Broker

	mu        sync.Mutex
	closed    bool
	consumers map[*consumer]struct{}
	producers int
}

func (cl *client) CreateProducer(opts pulsar.ProducerOptions) (pulsar.Producer, error) {
	if opts.Topic == "" {
		return nil, errors.New("fakepulsar: producer topic is required")
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return nil, ErrClientClosed
	}
	cl.producers++
	name := opts.Name
	if name == "" {
		name = "fake-producer-" + strconv.Itoa(cl.producers)
	}
	return &producer{cl: cl, topic: opts.Topic, name: name}, nil
}

func (cl *client) Subscribe(opts pulsar.ConsumerOptions) (pulsar.Consumer, error) {
	if opts.Topic == "" || len(opts.Topics) > 0 || opts.TopicsPattern != "" {
		return nil, errors.New("fakepulsar: exactly one Topic is modelled")
	}
	if opts.SubscriptionName == "" {
		return nil, errors.New("fakepulsar: subscription name is required")
	}
	if opts.Type != pulsar.Shared && opts.Type != pulsar.Exclusive {
		return nil, errUnsupported(fmt.Sprintf("subscription type %d", opts.Type))
	}
	if opts.DLQ != nil || opts.RetryEnable {
		return nil, errUnsupported("DLQ policy")
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return nil, ErrClientClosed
	}
	b := cl.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subFault != nil {
		if err := b.subFault(opts); err != nil {
			return nil, err
		}
	}
	t := b.topicLocked(opts.Topic)
	s := t.subs[opts.SubscriptionName]
	if s == nil {
		s = newSubscription(t, opts.SubscriptionName, opts.Type, opts.SubscriptionInitialPosition)
		t.subs[s.name] = s
	}
	if len(s.consumers) > 0 && (s.typ == pulsar.Exclusive || opts.Type != s.typ) {
		return nil, fmt.Errorf("fakepulsar: subscription %s is busy (type %d)", s.name, s.typ)
	}
	s.typ = opts.Type
	capacity := opts.ReceiverQueueSize
	if capacity <= 0 {
		capacity = 1000
	}
	c := &consumer{
		b: b, s: s, opts: opts, client: cl, capacity: capacity,
		timers:   map[*timer]struct{}{},
		out:      make(chan pulsar.ConsumerMessage),
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		pumpDone: make(chan struct{}),
	}
	s.consumers = append(s.consumers, c)
	if cl.consumers == nil {
		cl.consumers = map[*consumer]struct{}{}
	}
	cl.consumers[c] = struct{}{}
	go c.pump()
	b.dispatchLocked(s)
	return c, nil
}

func (cl *client) forget(c *consumer) {
	cl.mu.Lock()
	delete(cl.consumers, c)
	cl.mu.Unlock()
}

// Close closes every consumer of the client (their unacknowledged messages
// go back to the broker) and fails later calls.
func (cl *client) Close() {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return
	}
	cl.closed = true
	cs := make([]*consumer, 0, len(cl.consumers))
	for c := range cl.consumers {
		cs = append(cs, c)
	}
	cl.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (cl *client) isClosed() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.closed
}

func (cl *client) TopicPartitions(topic string) ([]string, error) { return []string{topic}, nil }

func (cl *client) CreateReader(pulsar.ReaderOptions) (pulsar.Reader, error) {
	return nil, errUnsupported("CreateReader")
}
func (cl *client) CreateTableView(pulsar.TableViewOptions) (pulsar.TableView, error) {
	return nil, errUnsupported("CreateTableView")
}
func (cl *client) NewTransaction(time.Duration) (pulsar.Transaction, error) {
	return nil, errUnsupported("NewTransaction")
}

// producer publishes synchronously: a send is stored (and its receipt
// given) before Send returns or the SendAsync callback runs.
type producer struct {
	cl    *client
	topic string
	name  string

	mu     sync.Mutex
	closed bool
}

func (p *producer) Topic() string         { return p.topic }
func (p *producer) Name() string          { return p.name }
func (p *producer) LastSequenceID() int64 { return -1 }
func (p *producer) Flush() error          { return nil }

func (p *producer) FlushWithCtx(context.Context) error { return nil }

func (p *producer) Send(ctx context.Context, pm *pulsar.ProducerMessage) (pulsar.MessageID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed || p.cl.isClosed() {
		return nil, ErrClientClosed
	}
	p.cl.b.mu.Lock()
	defer p.cl.b.mu.Unlock()
	id, err := p.cl.b.publishLocked(p.topic, p.name, pm)
	if err != nil {
		return nil, err
	}
	return id, nil
}

func (p *producer) SendAsync(ctx context.Context, pm *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	id, err := p.Send(ctx, pm)
	cb(id, pm, err)
}

func (p *producer) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

var (
	_ pulsar.Client   = (*client)(nil)
	_ pulsar.Producer = (*producer)(nil)
)
