package embedded

import (
	"strings"
	"testing"
)

// The stacks of mochi v2.7.9's recursive-read-lock deadlock, as the Go
// runtime prints them: goroutine 41 holds the client's inflight read lock
// in NextImmediate and waits for it again in GetAll behind goroutine 57,
// a publish waiting for the write lock.
const deadlockStacks = `goroutine 1 [running]:
main.main()
	/x/main.go:25 +0xdc

goroutine 41 [sync.RWMutex.RLock, 3 minutes]:
sync.runtime_SemacquireRWMutexR(0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/sema.go:100 +0x25
sync.(*RWMutex).RLock(...)
	/usr/local/go/src/sync/rwmutex.go:74
github.com/mochi-mqtt/server/v2.(*Inflight).GetAll(0xc0001d2000, 0x1)
	/m/server/v2@v2.7.9/inflight.go:75 +0x3c
github.com/mochi-mqtt/server/v2.(*Inflight).NextImmediate(0xc0001d2000)
	/m/server/v2@v2.7.9/inflight.go:99 +0x7e
github.com/mochi-mqtt/server/v2.(*Server).processPuback(0xc000180000, 0xc000210000, {0x0, 0x0})
	/m/server/v2@v2.7.9/server.go:720 +0x1a5
created by github.com/mochi-mqtt/server/v2.(*Server).attachClient in goroutine 30
	/m/server/v2@v2.7.9/server.go:400 +0x5f

goroutine 57 [sync.RWMutex.Lock, 3 minutes]:
sync.runtime_SemacquireRWMutex(0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/sema.go:105 +0x25
sync.(*RWMutex).Lock(0xc0001d2000)
	/usr/local/go/src/sync/rwmutex.go:155 +0x6b
github.com/mochi-mqtt/server/v2.(*Inflight).Set(0xc0001d2000, {0x0, 0x0})
	/m/server/v2@v2.7.9/inflight.go:40 +0x45
created by github.com/mochi-mqtt/server/v2.(*Server).attachClient in goroutine 30
	/m/server/v2@v2.7.9/server.go:400 +0x5f
`

func TestInflightDeadlockIsProvenFromStacks(t *testing.T) {
	proof := inflightDeadlock([]byte(deadlockStacks), 40)
	for _, want := range []string{"goroutine 41", "0xc0001d2000", "NextImmediate", "goroutine 57 waits for its write lock"} {
		if !strings.Contains(proof, want) {
			t.Fatalf("proof %q does not say %q", proof, want)
		}
	}
	// Goroutines of brokers started before this one are not reported.
	if p := inflightDeadlock([]byte(deadlockStacks), 41); p != "" {
		t.Fatalf("a deadlock older than the broker was reported: %q", p)
	}
	// A reader waiting for its first read lock behind a writer is waiting,
	// not deadlocked: it holds nothing.
	first := strings.Replace(deadlockStacks, "github.com/mochi-mqtt/server/v2.(*Inflight).GetAll(0xc0001d2000, 0x1)\n\t/m/server/v2@v2.7.9/inflight.go:75 +0x3c\n", "", 1)
	if p := inflightDeadlock([]byte(first), 0); p != "" {
		t.Fatalf("a plain wait for the read lock was reported as the deadlock: %q", p)
	}
}

func TestNoInflightDeadlockOnAHealthyBroker(t *testing.T) {
	b, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if b.startGoroutine <= 0 {
		t.Fatalf("start goroutine id %d, want the highest id at Start", b.startGoroutine)
	}
	if p := b.InflightDeadlock(); p != "" {
		t.Fatalf("healthy broker reported %q", p)
	}
	if p := ProvenDeadlock(); p != "" {
		t.Fatalf("a process with one healthy broker reported %q", p)
	}
}
