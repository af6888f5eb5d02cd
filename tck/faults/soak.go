package faults

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// Soak parameters: the share of attempts failing transiently, the share
// of poison messages, the producers' batch and the backlog they keep at
// most (so memory is bounded by it and by the in-flight limit, not by the
// number of messages).
const (
	soakTransientPct = 2   // % of attempts
	soakPoisonPer    = 200 // one message in soakPoisonPer is poison
	soakBatch        = 100
	soakProducers    = 4
	soakBacklog      = 4000
	soakInFlight     = 64
)

// SoakMessagesEnv names an environment variable that overrides
// Target.SoakMessages (to compare memory at two sizes).
const SoakMessagesEnv = "SLUICE_SOAK_MESSAGES"

func init() { register("soak", always, scenarioSoak) }

// soak: SoakMessages messages with random transient failures and poison,
// producers and consumers running together; the ledger must end at zero
// lost. Reports throughput and peak memory.
func scenarioSoak(e *env) {
	n := e.target.SoakMessages
	if v, err := strconv.Atoi(os.Getenv(SoakMessagesEnv)); err == nil && v > 0 {
		n = v
	}
	pa, ca := e.adapter(), e.adapter()
	e.dlq(ca, nil)
	spec := e.spec()
	spec.InFlight = soakInFlight
	spec.Retry = ports.RetryPolicy{MaxAttempts: 4, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	e.consume(ca, spec, func(_ context.Context, d *ports.Delivery) error {
		b, err := decodeBody(d)
		switch {
		case err != nil:
			return err
		case b.N%soakPoisonPer == 7:
			return ports.Poisonf("soak poison %d", b.N)
		case chance(b.N, d.RedeliveryCount) < soakTransientPct:
			return errors.New("soak transient failure")
		}
		return nil
	})

	stopSampling := make(chan struct{})
	var peakRSS, peakHeap, peakLive int64
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			rss, _ := memStatus()
			runtime.ReadMemStats(&ms)
			metrics.Read(live)
			peakRSS, peakHeap = max(peakRSS, rss), max(peakHeap, int64(ms.HeapInuse))
			if live[0].Value.Kind() == metrics.KindUint64 {
				peakLive = max(peakLive, int64(live[0].Value.Uint64()))
			}
			select {
			case <-tick.C:
			case <-stopSampling:
				return
			}
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, soakProducers)
	per := (n + soakProducers - 1) / soakProducers
	for w := range soakProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.soakProduce(pa, w*per, min(n, (w+1)*per)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("soak producer: %v", err)
	}
	e.settled()
	elapsed := time.Since(start)
	e.await("every soak poison message on the dead-letter topic", func(c tck.Counts) bool { return c.DeadLetterArrived == c.DeadLettered })
	close(stopSampling)
	sampler.Wait()
	_, hwm := memStatus()
	c := e.l.Counts()
	e.t.Logf("SOAK %s messages=%d elapsed=%v rate=%.0f/s acked=%d dead=%d requeued=%d peak-rss=%.1fMiB vm-hwm=%.1fMiB peak-heap-inuse=%.1fMiB peak-live-heap=%.1fMiB ledger-records=%.1fMiB in-flight=%d backlog<=%d",
		e.target.Name, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), c.Acked, c.DeadLettered, c.Requeued,
		mib(peakRSS), mib(hwm), mib(peakHeap), mib(peakLive), mib(e.l.Footprint()), soakInFlight, soakBacklog)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// chance is a deterministic pseudo-random number in [0, 100) per message
// and attempt.
func chance(n, attempt int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strconv.Itoa(n) + "/" + strconv.Itoa(attempt)))
	return int(h.Sum32() % 100)
}

// soakProduce sends messages [from, to) in batches, retrying unconfirmed
// ones with their ids, and keeps the unsettled backlog under soakBacklog.
func (e *env) soakProduce(a ports.Sender, from, to int) error {
	for i := from; i < to; i += soakBatch {
		ctx, cancel := withTimeout(e.ctx, e.target)
		err := e.l.Await(ctx, "the soak backlog to drain", func(c tck.Counts) bool { return c.Confirmed-c.Settled < soakBacklog })
		cancel()
		if err != nil {
			return err
		}
		batch := make([]ports.Message, 0, soakBatch)
		for j := i; j < min(to, i+soakBatch); j++ {
			batch = append(batch, e.message(j, false))
		}
		for len(batch) > 0 {
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			err := e.l.Send(ctx, a, batch...)
			cancel()
			if err == nil {
				break
			}
			if e.ctx.Err() != nil || errors.Is(err, ports.ErrClosed) {
				return err
			}
			failed := tck.UnconfirmedIndexes(err, len(batch))
			retry := batch[:0:0]
			for k, m := range batch {
				if failed[k] {
					retry = append(retry, m)
				}
			}
			batch = retry
		}
	}
	return nil
}
