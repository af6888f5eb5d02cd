package pulsartest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
)

const (
	// serverVersion is sent in CONNECTED.
	serverVersion = "pulsartest"
	// maxProtocolVersion is the highest protocol version the broker speaks
	// (v20: topic migration, which it never sends).
	maxProtocolVersion int32 = 20
	// defaultMaxMessageSize matches a stock Apache Pulsar broker.
	defaultMaxMessageSize = 5 * 1024 * 1024
)

// schemaVersion is the version returned for every schema a producer
// declares: the broker records no schemas.
var schemaVersion = make([]byte, 8)

// ErrClosed is returned by operations on a closed Broker.
var ErrClosed = errors.New("pulsartest: broker closed")

// Option configures Start.
type Option func(*config) error

type config struct {
	maxMessageSize int32
	batchIndexAck  bool
	logf           func(format string, args ...any)

	tls      *tls.Config // nil: plaintext
	authOn   bool        // WithTokens or WithTLSAuth given
	tokens   []string
	tlsAuth  bool
	tlsNames []string
}

// WithMaxMessageSize sets the max_message_size announced in CONNECTED and
// enforced on SEND. Default: 5 MiB, as a stock Apache Pulsar broker.
func WithMaxMessageSize(n int) Option {
	return func(c *config) error {
		if n < 1024 || n > 1<<30 {
			return fmt.Errorf("pulsartest: max message size %d out of range [1 KiB, 1 GiB]", n)
		}
		c.maxMessageSize = int32(n)
		return nil
	}
}

// WithBatchIndexAck sets whether acknowledgements of single messages inside
// a batch entry (acks carrying an ack set) are kept, as a broker with
// acknowledgmentAtBatchIndexLevelEnabled does. Default: true, the Apache
// Pulsar default since PIP-391 (4.1); brokers before it default to false,
// where such partial acks are ignored and a batch entry stays unacknowledged
// until every message in it is acknowledged.
func WithBatchIndexAck(enabled bool) Option {
	return func(c *config) error {
		c.batchIndexAck = enabled
		return nil
	}
}

// WithLogf sends the broker's diagnostics (refused commands, dropped
// connections, protocol errors) to logf, for example t.Logf. Default: none.
// logf must be safe for concurrent use and must not block.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(c *config) error {
		if logf == nil {
			return errors.New("pulsartest: WithLogf(nil)")
		}
		c.logf = logf
		return nil
	}
}

// Broker is an in-process Pulsar broker speaking the binary protocol on a
// loopback TCP port. All its methods are safe for concurrent use.
type Broker struct {
	cfg config
	ln  net.Listener
	url string
	wg  sync.WaitGroup // accept loop and connection goroutines

	mu         sync.Mutex
	closed     bool
	conns      map[*conn]struct{}
	topics     map[string]*topic
	nextLedger uint64
	nextName   uint64
	faults     faultState
	counters   Counters
}

// Start starts a broker listening on a free 127.0.0.1 port. Close it when
// done.
func Start(opts ...Option) (*Broker, error) {
	cfg := config{maxMessageSize: defaultMaxMessageSize, batchIndexAck: true, logf: func(string, ...any) {}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.tlsAuth && cfg.tls == nil {
		return nil, errors.New("pulsartest: WithTLSAuth needs WithTLS")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pulsartest: listen: %w", err)
	}
	scheme := "pulsar://"
	if cfg.tls != nil {
		ln = tls.NewListener(ln, cfg.tls)
		scheme = "pulsar+ssl://"
	}
	b := &Broker{
		cfg:        cfg,
		ln:         ln,
		url:        scheme + ln.Addr().String(),
		conns:      map[*conn]struct{}{},
		topics:     map[string]*topic{},
		nextLedger: 1,
	}
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

// URL returns the service URL clients connect to: "pulsar://127.0.0.1:port",
// or "pulsar+ssl://127.0.0.1:port" with WithTLS.
func (b *Broker) URL() string { return b.url }

// Close stops the listener, closes every client connection and waits for
// the broker's goroutines. Stored messages are dropped. It is idempotent.
func (b *Broker) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		return
	}
	b.closed = true
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	for _, t := range b.topics {
		for _, s := range t.subs {
			s.stopTimer()
		}
	}
	b.mu.Unlock()
	_ = b.ln.Close()
	for _, c := range conns {
		c.shutdown("broker closed")
	}
	b.wg.Wait()
}

func (b *Broker) acceptLoop() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return // listener closed
		}
		c := newConn(b, nc)
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = nc.Close()
			return
		}
		b.conns[c] = struct{}{}
		b.counters.Connections++
		b.wg.Add(2)
		b.mu.Unlock()
		go c.readLoop(bufio.NewReaderSize(nc, 64*1024))
		go c.writeLoop()
	}
}

// DropConnections closes every client connection at once, as a broker
// restart or a network cut would, and returns how many it closed. Consumers
// on them are removed (their unacknowledged messages become available for
// redelivery, with unchanged redelivery counts) and producers are
// forgotten; stored messages and subscriptions stay. Clients reconnect on
// their own.
func (b *Broker) DropConnections() int {
	b.mu.Lock()
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.shutdown("dropped by DropConnections")
	}
	return len(conns)
}

// logf logs a diagnostic through the configured WithLogf function.
func (b *Broker) logf(format string, args ...any) { b.cfg.logf("pulsartest: "+format, args...) }
