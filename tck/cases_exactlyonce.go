package tck

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(37, "ExactlyOnceTransform", func(c ports.Capabilities) string {
		if !c.TransactionalSend {
			return "declares no TransactionalSend capability (no broker transaction holds a consumed position and produced messages; flow refuses TransactSink with ports.ErrExactlyOnce)"
		}
		return ""
	}, caseExactlyOnceTransform)
}

// TransactionKiller is implemented by harnesses whose adapters declare
// Capabilities.TransactionalSend: it kills a consumer in the middle of a
// transaction, the way a crashed process dies. ExactlyOnceTransform
// needs it; without it that case is skipped and reported as a gap.
type TransactionKiller interface {
	// KillAtCommit arms a kill of a, an adapter this harness made: at a's
	// next transaction commit, a is cut off from the broker as a crashed
	// process is (its connections closed, nothing more sent or received,
	// no goodbye). With afterCommit false the commit request never
	// reaches the broker; with true the broker receives it (the
	// transaction commits) and its answer never reaches a. killed is
	// closed once a is cut off. a is unusable afterwards; the kit still
	// closes it.
	KillAtCommit(a ports.Adapter, afterCommit bool) (killed <-chan struct{})
}

// result is what the transform of ExactlyOnceTransform sends for each
// input: the input's number.
type result struct {
	In int `json:"in"`
}

// 37. consume → transform → produce in one transaction: n inputs, each
// transformed into one result on another topic by a TransactSink; the
// consumer is killed between producing and committing, a second one
// between committing and learning of it, and a third finishes. Read
// committed, the output holds every result exactly once.
func caseExactlyOnceTransform(k *kit) {
	killer, ok := k.h.(TransactionKiller)
	if !ok {
		k.t.Skipf("SKIP harness: adapter %q declares TransactionalSend, but its harness cannot kill a consumer mid-transaction (tck.TransactionKiller): exactly-once is not proven here", k.name)
	}
	const n = 60
	out := k.topic + ".out"
	spec := k.spec()
	spec.QoS = ports.ExactlyOnce
	results := k.readResults(out)
	transform := func(a ports.Adapter) *flow.Pipeline {
		p := flow.New(a, spec, flow.WithDrainTimeout(0), flow.WithErrorHandler(func(error) {}))
		in := flow.Decode[payload](p.Source())
		flow.TransactTo(flow.Map(in, func(_ context.Context, v payload) (result, error) {
			return result{In: v.N}, nil
		}), out)
		if err := p.Start(k.ctx); err != nil {
			k.t.Fatalf("starting the transform: %v", err)
		}
		k.t.Cleanup(func() { // a killed one is a dead process: nothing to settle
			ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
			defer cancel()
			_ = p.Stop(ctx)
		})
		return p
	}
	kill := func(afterCommit bool, what string) {
		a := k.adapter()
		killed := killer.KillAtCommit(a, afterCommit)
		p := transform(a)
		select {
		case <-killed:
			k.t.Logf("transform killed %s", what)
		case <-time.After(k.opts.Timeout):
			k.t.Fatalf("timed out after %v waiting for the transform to commit a transaction (stats %+v)", k.opts.Timeout, p.Stats())
		}
	}
	first := k.adapter()
	p := transform(first) // creates the group, so that the inputs are kept for it
	stop, cancel := context.WithTimeout(k.ctx, k.opts.Timeout)
	_ = p.Stop(stop)
	cancel()
	k.send(k.first, n)
	kill(false, "between producing its results and committing them")
	kill(true, "between committing and learning of the commit")
	transform(k.adapter()) // finishes
	counts := results.wait(n, k.opts.Timeout*3)
	time.Sleep(k.opts.Quiet) // a late duplicate would show now
	counts = results.snapshot()
	dups, missing := 0, 0
	for i := range n {
		switch c := counts[i]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
		}
	}
	k.t.Logf("EXACTLY-ONCE inputs=%d distinct-results=%d duplicates=%d missing=%d (read committed)", n, len(counts), dups, missing)
	if dups != 0 || missing != 0 {
		k.t.Fatalf("read committed, the output has %d duplicate and %d missing result(s) of %d inputs", dups, missing, n)
	}
}

// results counts, per input, the results read from a topic by a consumer
// of its own group.
type results struct {
	mu     sync.Mutex
	counts map[int]int
	more   chan struct{}
}

// readResults starts reading topic from its start in a group of its own.
func (k *kit) readResults(topic ports.Topic) *results {
	r := &results{counts: map[int]int{}, more: make(chan struct{}, 1)}
	spec := ports.SubscriptionSpec{Topic: topic, Group: k.group + "-reader", Start: ports.StartEarliest}
	k.consume(k.first, spec, func(_ context.Context, d *ports.Delivery) error {
		var v result
		if err := json.Unmarshal(d.Payload, &v); err != nil {
			return ports.Poisonf("result %q: %v", d.Payload, err)
		}
		r.mu.Lock()
		r.counts[v.In]++
		r.mu.Unlock()
		select {
		case r.more <- struct{}{}:
		default:
		}
		return nil
	})
	return r
}

func (r *results) snapshot() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]int, len(r.counts))
	for i, c := range r.counts {
		out[i] = c
	}
	return out
}

// wait returns the counts once n inputs have a result, or at timeout.
func (r *results) wait(n int, timeout time.Duration) map[int]int {
	deadline := time.After(timeout)
	for {
		if c := r.snapshot(); len(c) >= n {
			return c
		}
		select {
		case <-r.more:
		case <-deadline:
			return r.snapshot()
		}
	}
}
