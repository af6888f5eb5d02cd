package rocketmqtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DeadLetterPrefix is the prefix RocketMQ gives a consumer group's
// dead-letter topic: messages of group G that ran out of delivery attempts
// (or were forwarded with ForwardMessageToDeadLetterQueue) land in
// "%DLQ%G".
const DeadLetterPrefix = "%DLQ%"

// Defaults of the peer, chosen to match Apache RocketMQ 5 where the
// protocol leaves the value to the server.
const (
	// DefaultMaxBodySize is the Publishing.MaxBodySize the peer announces
	// in its Telemetry settings (RocketMQ's default: 4 MiB).
	DefaultMaxBodySize = 4 << 20
	// DefaultMaxDeliveryAttempts is the number of deliveries after which a
	// message whose invisibility expired again moves to the group's
	// dead-letter topic (RocketMQ: 16 retries plus the first delivery = 17;
	// the peer keeps the simpler "attempts" count of the v5 protocol).
	DefaultMaxDeliveryAttempts = 17
	// DefaultLongPolling is how long a ReceiveMessage waits for a message
	// when the client announced no long-polling timeout.
	DefaultLongPolling = 5 * time.Second
	// longPollMargin is how long before the call's deadline a long poll
	// with nothing to deliver answers "no message".
	longPollMargin = 500 * time.Millisecond
)

// Option configures a Broker.
type Option func(*Broker)

// WithMaxBodySize sets the Publishing.MaxBodySize announced to producers
// and enforced on SendMessage.
func WithMaxBodySize(n int) Option { return func(b *Broker) { b.maxBody = n } }

// WithMaxDeliveryAttempts sets after how many deliveries a message whose
// invisibility expires again is moved to the group's dead-letter topic.
func WithMaxDeliveryAttempts(n int) Option { return func(b *Broker) { b.maxAttempts = n } }

// WithoutAutoCreate makes QueryRoute and SendMessage answer TOPIC_NOT_FOUND
// for topics not made with CreateTopic, as a RocketMQ cluster with
// autoCreateTopicEnable=false does. By default every topic exists.
func WithoutAutoCreate() Option { return func(b *Broker) { b.autoCreate = false } }

// WithPlaintext serves gRPC without TLS. The v5 Go client then needs its
// process-wide golang.EnableSsl set to false (or the environment variable
// rocketmq.client.enableSsl=false when the client package initialises).
func WithPlaintext() Option { return func(b *Broker) { b.plaintext = true } }

// Broker is an in-process RocketMQ 5 gRPC endpoint (the protocol a
// RocketMQ proxy speaks) backed by in-memory queues. Start one with Start;
// point the v5 client's Config.Endpoint at Endpoint().
type Broker struct {
	maxBody     int
	maxAttempts int
	autoCreate  bool
	plaintext   bool

	lis  *trackingListener
	srv  *grpc.Server
	host string
	port int

	mu       sync.Mutex
	topics   map[string]*topic
	clients  map[string]clientSettings // by x-mq-client-id
	closed   bool
	handleNo atomic.Int64
	offsets  atomic.Int64

	faults faults
	stats  counters
	authState

	wg sync.WaitGroup
}

type clientSettings struct {
	longPolling time.Duration
}

// Start listens on a free loopback port and serves the RocketMQ 5
// MessagingService there until Close.
func Start(opts ...Option) (*Broker, error) {
	b := &Broker{
		maxBody:     DefaultMaxBodySize,
		maxAttempts: DefaultMaxDeliveryAttempts,
		autoCreate:  true,
		topics:      make(map[string]*topic),
		clients:     make(map[string]clientSettings),
	}
	for _, o := range opts {
		o(b)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("rocketmqtest: listen on 127.0.0.1: %w", err)
	}
	addr := l.Addr().(*net.TCPAddr)
	b.host, b.port = addr.IP.String(), addr.Port
	b.lis = &trackingListener{Listener: l, conns: make(map[net.Conn]struct{})}
	sopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(b.unaryAuth, b.unaryFault),
		grpc.ChainStreamInterceptor(b.streamAuth, b.streamFault),
	}
	if !b.plaintext {
		cfg, err := selfSignedTLS()
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	b.srv = grpc.NewServer(sopts...)
	v2.RegisterMessagingServiceServer(b.srv, &service{b: b})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		_ = b.srv.Serve(b.lis)
	}()
	return b, nil
}

// Endpoint is the "host:port" to give the client (Config.Endpoint).
func (b *Broker) Endpoint() string { return net.JoinHostPort(b.host, strconv.Itoa(b.port)) }

// Close stops serving: open streams end, connections close, and every
// waiting ReceiveMessage returns. Close is idempotent.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, t := range b.topics {
		for _, g := range t.groups {
			g.wake()
		}
	}
	b.mu.Unlock()
	b.faults.releaseStall()
	b.srv.Stop()
	b.wg.Wait()
	return nil
}

// CreateTopic makes a topic exist (needed with WithoutAutoCreate).
func (b *Broker) CreateTopic(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.topicLocked(name, true)
}

// CreateGroup makes consumer group group exist on topic, starting at the
// topic's current end, as a group created by an administrator before its
// consumers start.
func (b *Broker) CreateGroup(topicName, group string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.topicLocked(topicName, true).groupLocked(group)
}

var errNoTopic = errors.New("topic not found")

// topicLocked returns the named topic, making it when create (or
// auto-create) allows. b.mu is held.
func (b *Broker) topicLocked(name string, create bool) *topic {
	t, ok := b.topics[name]
	if ok {
		return t
	}
	if !create && !b.autoCreate {
		return nil
	}
	t = &topic{name: name, groups: make(map[string]*group)}
	b.topics[name] = t
	return t
}

// topic is one RocketMQ topic with a single message queue (queue id 0).
type topic struct {
	name     string
	messages int64 // messages ever stored
	groups   map[string]*group
}

// groupLocked returns the consumer group, made at the topic's end when new:
// a new group never sees messages stored before it existed.
func (t *topic) groupLocked(name string) *group {
	g, ok := t.groups[name]
	if !ok {
		g = &group{name: name, topic: t.name, handles: make(map[string]*entry), notify: make(chan struct{})}
		t.groups[name] = g
	}
	return g
}

// message is one stored message.
type message struct {
	id         string
	topic      string
	body       []byte
	props      map[string]string
	tag        *string
	keys       []string
	msgGroup   *string
	born       time.Time
	bornHost   string
	deliverAt  time.Time // zero: at once
	offset     int64
	traceCtx   *string
	msgType    v2.MessageType
	origTopic  string // for dead letters: where it came from
	origGroup  string
	dlqAttempt int32
}

// entry is a message as seen by one consumer group.
type entry struct {
	msg       *message
	visibleAt time.Time // ready for delivery from then on
	attempts  int32     // deliveries so far
	handle    string    // current receipt handle ("" when not delivered)
	done      bool
}

// group is one consumer group's view of one topic: every message stored
// after the group was made, each with its own visibility and attempts.
type group struct {
	name    string
	topic   string
	entries []*entry // in store order; done entries are trimmed from the front
	handles map[string]*entry
	notify  chan struct{} // closed and replaced when something may have become ready
}

func (g *group) wake() {
	close(g.notify)
	g.notify = make(chan struct{})
}

func (g *group) trim() {
	i := 0
	for i < len(g.entries) && g.entries[i].done {
		g.entries[i] = nil
		i++
	}
	if i > 0 {
		g.entries = g.entries[i:]
	}
}

// storeLocked appends m to its topic and to every group on it. b.mu is held.
func (b *Broker) storeLocked(t *topic, m *message) {
	m.offset = t.messages
	t.messages++
	for _, g := range t.groups {
		g.entries = append(g.entries, &entry{msg: m, visibleAt: m.deliverAt})
		g.wake()
	}
	b.stats.stored.Add(1)
}

// take collects up to max ready entries of g, makes them invisible for
// invisible and gives each a fresh receipt handle. Entries whose
// invisibility expired after maxAttempts deliveries go to the dead-letter
// topic instead. It returns the earliest future time something becomes
// ready (zero: nothing pending). b.mu is held.
func (b *Broker) takeLocked(g *group, max int, invisible time.Duration, now time.Time) ([]*entry, time.Time) {
	var out []*entry
	var next time.Time
	for _, e := range g.entries {
		if e.done {
			continue
		}
		if e.visibleAt.After(now) {
			if next.IsZero() || e.visibleAt.Before(next) {
				next = e.visibleAt
			}
			continue
		}
		if len(out) >= max {
			break
		}
		if e.handle != "" {
			delete(g.handles, e.handle)
			e.handle = ""
			b.stats.expired.Add(1)
		}
		if e.attempts >= int32(b.maxAttempts) {
			b.deadLetterLocked(g, e)
			continue
		}
		e.attempts++
		e.handle = b.newHandle(g, e)
		e.visibleAt = now.Add(invisible)
		g.handles[e.handle] = e
		b.watchLastAttemptLocked(g, e)
		out = append(out, e)
		if e.attempts > 1 {
			b.stats.redelivered.Add(1)
		}
	}
	g.trim()
	return out, next
}

func (b *Broker) newHandle(g *group, e *entry) string {
	return fmt.Sprintf("%s/%s/%d/%d", g.name, e.msg.id, e.attempts, b.handleNo.Add(1))
}

// watchLastAttemptLocked moves e to the dead-letter topic as soon as its
// invisibility expires when it has used its last delivery attempt, as
// RocketMQ's revive service does, so the dead letter appears without
// another receive on the group. b.mu is held.
func (b *Broker) watchLastAttemptLocked(g *group, e *entry) {
	if e.attempts < int32(b.maxAttempts) {
		return
	}
	v := e.visibleAt
	time.AfterFunc(time.Until(v)+time.Millisecond, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed || e.done || !e.visibleAt.Equal(v) {
			return
		}
		b.deadLetterLocked(g, e)
		g.trim()
	})
}

// deadLetterLocked moves e from g to g's dead-letter topic. b.mu is held.
func (b *Broker) deadLetterLocked(g *group, e *entry) {
	e.done = true
	if e.handle != "" {
		delete(g.handles, e.handle)
		e.handle = ""
	}
	dlq := b.topicLocked(DeadLetterPrefix+g.name, true)
	m := *e.msg
	m.topic = dlq.name
	m.deliverAt = time.Time{}
	m.origTopic = e.msg.topic
	m.origGroup = g.name
	m.dlqAttempt = e.attempts
	m.props = cloneProps(e.msg.props)
	b.storeLocked(dlq, &m)
	b.stats.deadLettered.Add(1)
}

// lookupLocked finds the live entry behind a receipt handle. A handle is
// live until the message is acknowledged, its invisibility changed (a new
// handle replaces it) or its invisibility expires.
func (b *Broker) lookupLocked(topicName, groupName, handle string, now time.Time) (*group, *entry, *v2.Status) {
	t := b.topics[topicName]
	if t == nil {
		return nil, nil, status(v2.Code_TOPIC_NOT_FOUND, "topic "+topicName+" not found")
	}
	g := t.groups[groupName]
	if g == nil {
		return nil, nil, status(v2.Code_CONSUMER_GROUP_NOT_FOUND, "group "+groupName+" not found on topic "+topicName)
	}
	e := g.handles[handle]
	if e == nil || e.done {
		return g, nil, status(v2.Code_INVALID_RECEIPT_HANDLE, "receipt handle is unknown or no longer valid (acknowledged, changed, or redelivered)")
	}
	if !e.visibleAt.After(now) {
		return g, nil, status(v2.Code_INVALID_RECEIPT_HANDLE, "receipt handle expired: the invisible duration has passed")
	}
	return g, e, nil
}

func cloneProps(p map[string]string) map[string]string {
	if p == nil {
		return nil
	}
	c := make(map[string]string, len(p))
	for k, v := range p {
		c[k] = v
	}
	return c
}

func status(code v2.Code, msg string) *v2.Status { return &v2.Status{Code: code, Message: msg} }

var okStatus = status(v2.Code_OK, "OK")

// Backlog reports, for consumer group group on topic, how many messages
// are not yet acknowledged (ready, delayed or invisible) and how many of
// those are currently invisible (delivered, awaiting ack).
func (b *Broker) Backlog(topicName, group string) (pending, invisible int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[topicName]
	if t == nil {
		return 0, 0
	}
	g := t.groups[group]
	if g == nil {
		return 0, 0
	}
	now := time.Now()
	for _, e := range g.entries {
		if e.done {
			continue
		}
		pending++
		if e.handle != "" && e.visibleAt.After(now) {
			invisible++
		}
	}
	return pending, invisible
}

// Groups lists the consumer groups that exist on topic.
func (b *Broker) Groups(topicName string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[topicName]
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.groups))
	for name := range t.groups {
		out = append(out, name)
	}
	return out
}

// Stored reports how many messages topic holds in total (acknowledged or
// not): a way to check a dead-letter topic.
func (b *Broker) Stored(topicName string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[topicName]; t != nil {
		return int(t.messages)
	}
	return 0
}

// Counters is a snapshot of what the peer did.
type Counters struct {
	Stored       int64 // messages stored (sends and dead letters)
	Received     int64 // messages handed out by ReceiveMessage
	Redelivered  int64 // deliveries with attempt > 1
	Expired      int64 // invisibility timeouts that made a message ready again
	Acked        int64 // AckMessage entries accepted
	Changed      int64 // ChangeInvisibleDuration calls accepted
	DeadLettered int64 // messages moved to a dead-letter topic
	RefusedSends int64 // SendMessage calls refused by a fault hook
	BadHandles   int64 // ack / change calls with an unknown or expired handle
}

type counters struct {
	stored, received, redelivered, expired, acked, changed, deadLettered, refused, badHandles atomic.Int64
}

// Counters returns a snapshot of the peer's counters.
func (b *Broker) Counters() Counters {
	s := &b.stats
	return Counters{
		Stored: s.stored.Load(), Received: s.received.Load(), Redelivered: s.redelivered.Load(),
		Expired: s.expired.Load(), Acked: s.acked.Load(), Changed: s.changed.Load(),
		DeadLettered: s.deadLettered.Load(), RefusedSends: s.refused.Load(), BadHandles: s.badHandles.Load(),
	}
}

// trackingListener remembers accepted connections so DropConnections can
// cut them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return &trackedConn{Conn: c, l: l}, nil
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.Conn)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *trackingListener) dropAll() int {
	l.mu.Lock()
	conns := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// ctxWait is the long-poll wait: until ch closes, t passes, or ctx ends.
func ctxWait(ctx context.Context, ch <-chan struct{}, until time.Time) {
	d := time.Until(until)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ch:
	case <-tm.C:
	case <-ctx.Done():
	}
}
