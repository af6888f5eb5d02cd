package tck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(36, "ShareGroupPerRecordSettlement", func(c ports.Capabilities) string {
		if !c.PerMessageAck || !c.CompetingConsumers {
			return "declares no PerMessageAck and CompetingConsumers capabilities (a group's records are bound to partitions, or settled in order)"
		}
		return ""
	}, caseShareGroupPerRecord)
}

// 36. per-record settlement in a group whose records are shared out one by
// one (a queue, a Kafka share group): a record held by a slow handler and
// one requeued hold back none of the records after them, though all carry
// one partition key; and more instances than a topic has partitions all
// receive.
func caseShareGroupPerRecord(k *kit) {
	const n = 6
	oneKey := func(m *ports.Message) { m.Key = "one-partition" }
	release := make(chan struct{})
	var (
		mu       sync.Mutex
		slow     string
		requeued string
	)
	c := k.consume(k.first, k.spec(), func(ctx context.Context, d *ports.Delivery) error {
		mu.Lock()
		switch {
		case slow == "" || slow == d.ID:
			slow = d.ID
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case requeued == "" && d.RedeliveryCount == 0:
			requeued = d.ID
			mu.Unlock()
			return errors.New("requeue once")
		}
		mu.Unlock()
		return nil
	})
	k.sendTo(k.first, k.topic, n, oneKey)
	c.waitStats(fmt.Sprintf("the %d records after the slow one acked (one of them requeued first) while it is still held", n-1),
		func(s flow.Stats) bool { return s.Acked == n-1 && s.Requeued == 1 })
	close(release)
	c.waitStats("the slow record acked once released", func(s flow.Stats) bool { return s.Acked == n })
	c.stop()

	// Three instances, each holding one record until all three have one:
	// an instance that is never given a record fails the case.
	const instances = 3
	var (
		got  = map[int]bool{}
		all  = make(chan struct{})
		once sync.Once
	)
	sp := k.spec()
	sp.Group, sp.InFlight = k.group+"-wide", 1
	for i := range instances {
		k.consumeOn(k.adapter(), sp, 1, func(ctx context.Context, _ *ports.Delivery) error {
			mu.Lock()
			if got[i] = true; len(got) == instances {
				once.Do(func() { close(all) })
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
			}
			return nil
		})
	}
	k.sendTo(k.first, k.topic, 4*instances, func(m *ports.Message) { m.Key = ports.NewID() })
	select {
	case <-all:
	case <-time.After(k.opts.Timeout):
		mu.Lock()
		defer mu.Unlock()
		k.t.Fatalf("timed out after %v: %d of %d instances of one group received a record (want every instance, however many partitions the topic has)", k.opts.Timeout, len(got), instances)
	}
}
