package tck

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Ledger is the zero-loss ledger of a reliability test: it follows every
// message, by its unique id, from the send attempt to its terminal
// settlement, and at the end states what was lost and what was delivered
// more than once.
//
// The sender side records attempts and broker confirms (Ledger.Send does
// both); the consumer side records deliveries and settlements (plug
// Ledger.Observe into a pipeline with flow.WithObserver, or call Delivered
// and Settled yourself for consumers the observer cannot see, such as a
// killed subprocess). Then
//
//	lost = confirmed − (acked ∪ dead-lettered)
//
// counted over unique ids. A lost message fails the test (Ledger.Check).
//
// # Duplicates
//
// A redelivery after a Requeue is the contract at work, not a duplicate.
// Every other delivery beyond a message's first is a duplicate, and the
// ledger files it under the window it fell in — the state of the
// message's previous delivery when the new one arrived (see Window).
//
// # Cost
//
// Ids minted by NewID are kept in a slice of 20-byte records, so a
// million-message soak costs about 20 MB; other ids go into a map.
// A Ledger is safe for concurrent use.
type Ledger struct {
	adapter, fault string
	prefix         string
	start          time.Time
	position       func(*ports.Delivery) string
	deferred       func(error) bool

	mu       sync.Mutex
	minted   []rec
	foreign  map[string]*rec
	c        counts
	windows  map[Window]*WindowStat
	marks    []*Recovery
	phantoms []string                     // a sample of delivered ids never sent
	open     map[*ports.Delivery]struct{} // pipeline deliveries without an outcome yet
	external int                          // Delivered without an outcome (another process)
	peak     int
	waiters  int
	changed  chan struct{}

	// Effects per message id, once counted (ledger_effects.go).
	effects    map[string]int
	effectsSet bool
	suppressed int // duplicate deliveries an idempotent consumer absorbed
}

// counts are the ledger's running totals; unique-id counts are kept on the
// transition, so Report does not have to scan for them.
type counts struct {
	attempted, confirmed, acked, dead, terminalConfirmed int // unique ids
	deliveries, requeues, dups, dlqArrived, settleFailed int // events
	phantom, deferred                                    int // unique ids; deferred: unsettled, last settlement deferred
	ackUnknown                                           int // unique ids: unsettled, died after the effect (fateAckUnknown)
	inDoubt                                              int // unique ids: unsettled, last settlement in doubt (fateInDoubt)
}

// rec is one message's history, compact enough for a soak.
type rec struct {
	order      uint32 // ordinal of the first send attempt among all messages, from 1 (0: never attempted)
	pos        uint32 // hash of the last delivery's position (0: unknown)
	sends      uint16
	deliveries uint16
	attempt    uint16 // redelivery count of the last delivery
	acks       uint8
	deads      uint8
	flags      uint8
	fate       fate
	// early counts deliveries that arrived with a higher redelivery
	// count while the previous one had no outcome yet: a requeue copy
	// that overtook the requeue's settlement (Kafka republishes, then
	// commits). The requeue settlement absorbs it; another outcome makes
	// it a duplicate.
	early uint8
}

const (
	fAttempted uint8 = 1 << iota
	fConfirmed
	fAcked
	fDead
	fPhantom
	fDLQ
)

// fate is what became of a message's latest delivery.
type fate uint8

const (
	fateNone fate = iota
	fateOpen
	fateRequeued
	fateAcked
	fateDead
	fateUnsettled
	fateSettleFailed
	fateDied     // its process died holding it (Ledger.Died)
	fateDeferred // Settle failed with an error the adapter defers (see SetDeferred)
	// fateAckUnknown: its process died after the message's effect
	// committed, maybe after its ack reached the broker
	// (Ledger.DiedAfterEffect).
	fateAckUnknown
	// fateInDoubt: Settle failed with ports.ErrSettleInDoubt: the broker
	// may have applied the settlement; if it did not, it redelivers.
	fateInDoubt
)

// Window names the circumstance a duplicate delivery fell in: what had
// become of the message's previous delivery when the duplicate arrived.
type Window string

// Duplicate windows.
const (
	// WindowInFlight: the previous delivery had no outcome yet — its
	// consumer lost its connection or its process while handling it, and
	// the broker handed the message to another consumer (or to the
	// restarted one).
	WindowInFlight Window = "in-flight"
	// WindowUnsettled: the previous delivery ended without a settlement
	// (cancelled by stop, or completed after stop).
	WindowUnsettled Window = "unsettled"
	// WindowSettleFailed: the previous delivery's settlement failed (an
	// ack or a dead-letter publish the broker did not confirm).
	WindowSettleFailed Window = "settle-failed"
	// WindowPublishRetry: the message was sent more than once (a retried
	// unconfirmed send that had in fact been stored) and every copy was
	// delivered.
	WindowPublishRetry Window = "publish-retry"
	// WindowStoredTwice: the message arrived again from another broker
	// position after a confirmed settlement, without a retried send: the
	// client or broker stored it twice.
	WindowStoredTwice Window = "stored-twice"
	// WindowAfterSettle: the message arrived again after a confirmed ack
	// or dead letter, from the same position (or an unknown one): the
	// broker lost a settlement it had confirmed.
	WindowAfterSettle Window = "after-settle"
)

// WindowStat counts the duplicates of one window and when they happened,
// measured from the ledger's start.
type WindowStat struct {
	Count       int
	First, Last time.Duration
}

// Recovery is what happened after a mark (a fault injected or healed):
// the time to the first ack of a message first sent after it (fresh
// messages flow end to end again), and the time until every message
// confirmed before it was acked or dead-lettered (the backlog drained).
type Recovery struct {
	Mark      string
	At        time.Duration // since the ledger's start
	After     time.Duration // from the mark to that first fresh ack
	Recovered bool          // a fresh message was acked
	Drain     time.Duration // from the mark until the older messages settled
	Drained   bool          // they did

	attempts int                 // messages attempted before the mark
	pending  map[string]struct{} // confirmed before the mark, unsettled
}

// NewLedger returns an empty ledger for one fault against one adapter; both
// names appear in its LEDGER line.
func NewLedger(adapter, fault string) *Ledger {
	return &Ledger{
		adapter: adapter, fault: fault,
		prefix:  "ledger-" + randHex(6) + "-",
		start:   time.Now(),
		foreign: map[string]*rec{},
		windows: map[Window]*WindowStat{},
	}
}

// SetPosition tells the ledger how to read a delivery's broker position
// (a Pulsar message id, a Kafka partition/offset) from its Facts, so that
// a message stored twice is told apart from one redelivered after a lost
// settlement. Default: none (such duplicates count as WindowAfterSettle).
// Call it before the first delivery.
func (l *Ledger) SetPosition(fn func(*ports.Delivery) string) { l.position = fn }

// SetDeferred tells the ledger which Settle errors mean the adapter kept
// the settlement and will carry it out itself (a commit retried by a
// committer, an acknowledgement of the broker's redelivered copy), so the
// broker will not hand the message out again. A message whose last
// settlement failed that way counts as deferred, not lost. Default: none.
// Call it before the first delivery.
func (l *Ledger) SetDeferred(fn func(error) bool) { l.deferred = fn }

// NewID mints a unique message id that the ledger stores compactly.
func (l *Ledger) NewID() string {
	l.mu.Lock()
	n := len(l.minted)
	l.minted = append(l.minted, rec{})
	l.mu.Unlock()
	return l.prefix + strconv.FormatUint(uint64(n), 36)
}

// get returns id's record, creating it; l.mu must be held.
func (l *Ledger) get(id string) *rec {
	if rest, ok := strings.CutPrefix(id, l.prefix); ok {
		if n, err := strconv.ParseUint(rest, 36, 63); err == nil && n < uint64(len(l.minted)) {
			return &l.minted[n]
		}
	}
	r := l.foreign[id]
	if r == nil {
		r = &rec{}
		l.foreign[id] = r
	}
	return r
}

func (l *Ledger) since() time.Duration { return time.Since(l.start) }

// Attempted records send attempts of ids (before Send is called).
func (l *Ledger) Attempted(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		r := l.get(id)
		if r.flags&fAttempted == 0 {
			r.flags |= fAttempted
			l.c.attempted++
			r.order = uint32(l.c.attempted)
		}
		if r.sends < ^uint16(0) {
			r.sends++
		}
	}
}

// Confirmed records broker confirms of ids.
func (l *Ledger) Confirmed(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		r := l.get(id)
		if r.flags&fConfirmed != 0 {
			continue
		}
		r.flags |= fConfirmed
		l.c.confirmed++
		if r.flags&(fAcked|fDead) != 0 {
			l.c.terminalConfirmed++
		}
	}
	l.notify()
}

// Send sends msgs through s, recording each attempt and each confirm. A
// message without HeaderID gets one from NewID (on msgs itself, so a retry
// of the same slice resends the same ids). It returns Send's error; the
// messages it does not name were confirmed.
func (l *Ledger) Send(ctx context.Context, s ports.Sender, msgs ...ports.Message) error {
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].Headers.Get(ports.HeaderID) == "" {
			msgs[i].Headers.Set(ports.HeaderID, l.NewID())
		}
		ids[i] = msgs[i].Headers.Get(ports.HeaderID)
	}
	l.Attempted(ids...)
	err := s.Send(ctx, msgs...)
	failed := UnconfirmedIndexes(err, len(msgs))
	ok := ids[:0:0]
	for i, id := range ids {
		if !failed[i] {
			ok = append(ok, id)
		}
	}
	l.Confirmed(ok...)
	return err
}

// UnconfirmedIndexes returns which of n messages a Send error names as
// unconfirmed: the Index of every *ports.SendError joined in err, or all
// of them when err is not made of SendErrors. nil means all confirmed.
func UnconfirmedIndexes(err error, n int) map[int]bool {
	if err == nil {
		return nil
	}
	out := map[int]bool{}
	var walk func(error) bool
	walk = func(e error) bool {
		switch x := e.(type) {
		case *ports.SendError:
			if x.Index < 0 || x.Index >= n {
				return false
			}
			out[x.Index] = true
			return true
		case interface{ Unwrap() []error }:
			all := true
			for _, y := range x.Unwrap() {
				all = walk(y) && all
			}
			return all
		case interface{ Unwrap() error }:
			return walk(x.Unwrap())
		}
		return false
	}
	if !walk(err) {
		for i := range n {
			out[i] = true
		}
	}
	return out
}
