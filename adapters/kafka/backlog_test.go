//go:build backlog

package kafka_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The backlog benchmark (not part of the normal suite: build tag backlog):
//
//	go test -tags backlog -run TestBacklog -v -timeout 30m ./adapters/kafka/ \
//	    -backlog.n 200000 -backlog.inflight 1024 -backlog.mode flow
//
// It pre-publishes backlog.n records of ~130 bytes to a 4-partition topic
// on an in-process kfake cluster (a Kafka wire-protocol peer, not Apache
// Kafka), then consumes them from a fresh group at the oldest offset with
// a do-nothing handler and prints the records settled in each second, one
// "SECOND" line per second with the CPU time the process got in it (kfake
// runs in the same process), and a "BACKLOG" summary: the median second
// after the first and the lowest. It fails when a second after the first
// (the last, partial second excepted) settled less than half the median.
//
// backlog.mode flow runs a flow pipeline (flow.New → flow.Sink, one
// worker); raw drives the Subscription directly (Receive up to InFlight,
// one Settle per Receive), to tell the adapter from the core.
var (
	backlogN        = flag.Int("backlog.n", 200_000, "records pre-published")
	backlogInFlight = flag.Int("backlog.inflight", 1024, "SubscriptionSpec.InFlight")
	backlogMode     = flag.String("backlog.mode", "flow", "flow or raw")
	backlogKeyed    = flag.Bool("backlog.keyed", false, "give records one of 64 keys")
	backlogWindow   = flag.Duration("backlog.window", time.Second, "measurement window (SECOND lines when 1s)")
	backlogRequests = flag.Bool("backlog.requests", false, "count Fetch and OffsetCommit requests per second")
)

func TestBacklog(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var fetches, commits atomic.Int64
	if *backlogRequests {
		c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			fetches.Add(1)
			return nil, nil, false
		})
		c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			commits.Add(1)
			return nil, nil, false
		})
	}
	ctx := context.Background()
	cfg := kafka.Options{Brokers: c.ListenAddrs(), Namespace: "bl", Partitions: 4, StartFrom: kafka.StartOldest}
	a, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()

	n := *backlogN
	payload := []byte(`{"id":"0000000000","amount":1234,"currency":"EUR","note":"a backlog record of about 130 bytes....."}`)
	start := time.Now()
	var wg sync.WaitGroup
	const batch = 2000
	sem := make(chan struct{}, 4)
	var sendErr atomic.Value
	for i := 0; i < n; i += batch {
		msgs := make([]ports.Message, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			m := ports.Message{Topic: "t", Payload: payload}
			if *backlogKeyed {
				m.Key = fmt.Sprintf("k%02d", j%64)
			}
			msgs = append(msgs, m)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := a.Send(ctx, msgs...); err != nil {
				sendErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := sendErr.Load().(error); err != nil {
		t.Fatalf("pre-publish: %v", err)
	}
	t.Logf("pre-published %d records in %v", n, time.Since(start).Round(time.Millisecond))

	spec := ports.SubscriptionSpec{Topic: "t", Group: "backlog", InFlight: *backlogInFlight}
	var settled atomic.Int64
	var stop func()
	switch *backlogMode {
	case "flow":
		p := flow.New(a, spec, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		quit, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tk := time.NewTicker(10 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-tk.C:
					settled.Store(p.Stats().Acked)
				case <-quit:
					return
				}
			}
		}()
		stop = func() { close(quit); <-done; _ = p.Stop(ctx) }
	case "raw":
		s, err := a.Subscribe(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				ds, err := s.Receive(rctx, spec.InFlight)
				if err != nil {
					return
				}
				if err := s.Settle(rctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
					t.Errorf("settle: %v", err)
					return
				}
				settled.Add(int64(len(ds)))
			}
		}()
		stop = func() { cancel(); <-done; _ = s.Stop(ctx) }
	default:
		t.Fatalf("backlog.mode %q: want flow or raw", *backlogMode)
	}
	defer stop()

	began := time.Now()
	var perSec []int64
	var perCPU []float64 // records settled per CPU-second the process got, per window
	last := int64(0)
	lastCPU := cpuTime()
	deadline := began.Add(10 * time.Minute)
	for tick := time.NewTicker(*backlogWindow); ; {
		<-tick.C
		now := settled.Load()
		perSec = append(perSec, now-last)
		label := "SECOND"
		if *backlogWindow != time.Second {
			label = "WINDOW(" + backlogWindow.String() + ")"
		}
		cpu := cpuTime()
		extra := fmt.Sprintf(" cpu %4dms", (cpu - lastCPU).Milliseconds())
		if used := (cpu - lastCPU).Seconds(); used > 0 {
			perCPU = append(perCPU, float64(now-last)/used)
		} else {
			perCPU = append(perCPU, 0)
		}
		lastCPU = cpu
		if *backlogRequests {
			extra += fmt.Sprintf(" fetch-requests %5d commit-requests %5d", fetches.Swap(0), commits.Swap(0))
		}
		fmt.Printf("%s %3d settled %7d total %7d%s\n", label, len(perSec), now-last, now, extra)
		last = now
		if now >= int64(n) {
			tick.Stop()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("settled %d of %d in 10 minutes", now, n)
		}
	}
	total := time.Since(began)
	// Judge the full seconds after the first (the last one is partial).
	judged := perSec[1:]
	if len(judged) > 1 {
		judged = judged[:len(judged)-1]
	}
	if len(judged) == 0 {
		fmt.Printf("BACKLOG n=%d inflight=%d mode=%s window=%v: done in %v, too short to judge (use a shorter -backlog.window)\n", n, *backlogInFlight, *backlogMode, *backlogWindow, total.Round(time.Millisecond))
		return
	}
	sorted := slices.Clone(judged)
	slices.Sort(sorted)
	median, lowest := sorted[len(sorted)/2], sorted[0]
	fmt.Printf("BACKLOG n=%d inflight=%d mode=%s keyed=%v window=%v: %v, %.0f/s overall, first window %d, median after it %d, lowest %d (%.2f of median)\n",
		n, *backlogInFlight, *backlogMode, *backlogKeyed, *backlogWindow, total.Round(time.Millisecond), float64(n)/total.Seconds(), perSec[0], median, lowest, float64(lowest)/float64(median))
	cpuJudged := perCPU[1:]
	if len(cpuJudged) > 1 {
		cpuJudged = cpuJudged[:len(cpuJudged)-1]
	}
	cpuSorted := slices.Clone(cpuJudged)
	slices.Sort(cpuSorted)
	fmt.Printf("BACKLOG per CPU-second of this process (kfake included): median %.0f, lowest %.0f (%.2f of median)\n",
		cpuSorted[len(cpuSorted)/2], cpuSorted[0], cpuSorted[0]/cpuSorted[len(cpuSorted)/2])
	if lowest*2 < median {
		t.Errorf("a window settled %d, less than half the median %d: throughput is not flat", lowest, median)
	}
}

// cpuTime is the CPU time this process used so far (user + system): a
// window with little of it was starved by other processes on the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
