package kafka_test

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

var _ tck.TransactionKiller = (*harness)(nil)

// KillAtCommit cuts a off at its next EndTxn request (see killSwitch).
func (h *harness) KillAtCommit(a ports.Adapter, afterCommit bool) <-chan struct{} {
	return h.kills.get(a).arm(afterCommit)
}

// killSwitches are the kill switches of a harness's adapters.
type killSwitches struct {
	mu sync.Mutex
	m  map[ports.Adapter]*killSwitch
}

// wire routes every connection of cfg's clients through a new switch.
func (ks *killSwitches) wire(cfg kafka.Options) (kafka.Options, *killSwitch) {
	k := &killSwitch{conns: map[*killConn]struct{}{}, killed: make(chan struct{})}
	cfg.Sarama = func(c *sarama.Config) { c.Net.Proxy.Enable, c.Net.Proxy.Dialer = true, k }
	return cfg, k
}

func (ks *killSwitches) add(a ports.Adapter, k *killSwitch) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.m == nil {
		ks.m = map[ports.Adapter]*killSwitch{}
	}
	ks.m[a] = k
}

func (ks *killSwitches) get(a ports.Adapter) *killSwitch {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.m[a]
}

// killSwitch is the dialer of one adapter's clients. Armed, it watches the
// requests they write (sarama writes one whole request per Write) for
// EndTxn (API key 26), and kills the adapter there as a crash does: every
// connection closed, every later dial, read and write failing. Before the
// commit, the EndTxn is not written; after it, the EndTxn is written, the
// answers are held back, and the kill follows once the broker had time to
// apply it.
type killSwitch struct {
	mu     sync.Mutex
	conns  map[*killConn]struct{}
	armed  int // 0: no, 1: before the commit, 2: after it
	hold   bool
	dead   bool
	killed chan struct{}
}

var errKilled = errors.New("killed (a crashed process)")

const keyEndTxn = 26

func (k *killSwitch) arm(after bool) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = 1
	if after {
		k.armed = 2
	}
	return k.killed
}

func (k *killSwitch) Dial(network, addr string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errKilled
	}
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	kc := &killConn{Conn: c, k: k}
	k.conns[kc] = struct{}{}
	return kc, nil
}

func (k *killSwitch) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return
	}
	k.dead = true
	for c := range k.conns {
		_ = c.Conn.Close()
	}
	close(k.killed)
}

// state reports whether reads are held or the adapter is dead.
func (k *killSwitch) state() (hold, dead bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.hold, k.dead
}

type killConn struct {
	net.Conn
	k *killSwitch
}

func (c *killConn) Write(b []byte) (int, error) {
	k := c.k
	k.mu.Lock()
	armed, dead := k.armed, k.dead
	endTxn := len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == keyEndTxn
	if endTxn && armed == 2 {
		k.hold = true
	}
	k.mu.Unlock()
	switch {
	case dead:
		return 0, errKilled
	case endTxn && armed == 1:
		k.kill()
		return 0, errKilled
	case endTxn && armed == 2:
		n, err := c.Conn.Write(b)
		time.AfterFunc(300*time.Millisecond, k.kill) // the broker applies it meanwhile
		return n, err
	}
	return c.Conn.Write(b)
}

func (c *killConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if hold, dead := c.k.state(); hold || dead {
		<-c.k.killed
		return 0, errKilled
	}
	return n, err
}
