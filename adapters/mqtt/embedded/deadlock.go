package embedded

import (
	"bytes"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
)

// InflightDeadlock reports a known deadlock of mochi v2.7.9 in a client
// of a broker started in this process since b started, with the stacks
// that prove it, or "" when there is none.
//
// mochi's Inflight.NextImmediate takes the client's inflight read lock
// and then calls Inflight.GetAll, which takes the read lock again. A
// goroutine that asks for the write lock in between (a publish to that
// client storing its inflight packet) waits for the first read lock to be
// released, and Go's RWMutex makes the second read lock wait for that
// writer: the client's goroutines never run again, and what mochi held
// for it is never delivered. A goroutine blocked on a read lock inside
// GetAll called from NextImmediate is that deadlock and nothing else: it
// already holds the lock it waits for.
//
// The check reads the goroutine stacks of the process (runtime.Stack)
// and counts only goroutines started after b (goroutine ids grow), so a
// deadlock stranded by an earlier broker of the process is not reported
// again. Tests use it to tell this broker defect from a loss of sluice's
// own; see docs/reliability.md.
func (b *Broker) InflightDeadlock() string {
	return inflightDeadlock(allStacks(), b.startGoroutine)
}

// ProvenDeadlock is InflightDeadlock for the whole process: the proof of
// that deadlock in a client of any broker this process started, or "".
// The goroutines of a broker it struck stay blocked for good, even after
// Close; a test binary's final leak check uses it to tell them from a
// leak (adapters/mqtt's TestMain).
func ProvenDeadlock() string {
	return inflightDeadlock(allStacks(), 0)
}

func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// lastGoroutine is the highest goroutine id running now.
func lastGoroutine() int64 {
	var last int64
	for _, g := range goroutines(allStacks()) {
		last = max(last, g.id)
	}
	return last
}

type goroutine struct {
	id    int64
	state string
	stack []byte
}

var header = regexp.MustCompile(`^goroutine (\d+) \[([^\]]*)\]:`)

func goroutines(stacks []byte) []goroutine {
	var out []goroutine
	for _, block := range bytes.Split(stacks, []byte("\n\n")) {
		m := header.FindSubmatch(block)
		if m == nil {
			continue
		}
		id, err := strconv.ParseInt(string(m[1]), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutine{id: id, state: string(m[2]), stack: block})
	}
	return out
}

const inflightPkg = "github.com/mochi-mqtt/server/v2.(*Inflight)."

// recursiveRead matches GetAll's frame directly under a read lock,
// followed by NextImmediate's frame, and captures the Inflight's address.
var recursiveRead = regexp.MustCompile(`sync\.\(\*RWMutex\)\.RLock\(.*\)\n\t[^\n]*\n` +
	regexp.QuoteMeta(inflightPkg) + `GetAll\((0x[0-9a-f]+)[^\n]*\n\t[^\n]*\n` +
	regexp.QuoteMeta(inflightPkg) + `NextImmediate\(`)

func inflightDeadlock(stacks []byte, after int64) string {
	gs := goroutines(stacks)
	for _, g := range gs {
		if g.id <= after || !bytes.HasPrefix([]byte(g.state), []byte("sync.RWMutex.RLock")) {
			continue
		}
		m := recursiveRead.FindSubmatch(g.stack)
		if m == nil {
			continue
		}
		proof := fmt.Sprintf("mochi v2.7.9 deadlock: goroutine %d waits for a second read lock of Inflight %s inside NextImmediate → GetAll, which it already holds", g.id, m[1])
		for _, w := range gs {
			if bytes.HasPrefix([]byte(w.state), []byte("sync.RWMutex.Lock")) && bytes.Contains(w.stack, []byte("(*Inflight).")) && bytes.Contains(w.stack, m[1]) {
				proof += fmt.Sprintf(", while goroutine %d waits for its write lock", w.id)
				return proof + ":\n" + string(g.stack) + "\n\n" + string(w.stack)
			}
		}
		return proof + ":\n" + string(g.stack)
	}
	return ""
}
