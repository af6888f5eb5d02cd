// Command confirmloss replays a confirmed-send scenario across a RabbitMQ
// restart and counts what a consumer received of what Send reported
// confirmed.
//
// A publisher sends -n small JSON readings at -rate messages/s in Send
// calls of -size messages (up to -conc calls in flight), retrying every
// message whose Send failed. A consumer child process (flow.Decode →
// operators.Batch → flow.Sink, each batch's ids written to the parent over
// a pipe before the batch is acked) is SIGKILLed at -kills and restarted.
// At -at the broker is stopped (-fault stopapp: rabbitmqctl stop_app, then
// start_app -down after the stop began; crash: SIGKILL of the node and a
// start on the same data). At the end a fresh consumer drains the group.
//
// -failbatch makes the consumer fail that fraction of its batches (as a
// busy database would): the pipeline requeues them with a backoff, so the
// adapter publishes confirmed copies into its delay queues and acks the
// originals. Child side events (failed batches, requeues, redeliveries) go
// to <out>/<label>-run<N>-<id>.events; -linger keeps a consumer after the
// drain and reports when the missing messages arrive after all.
//
// Every run prints one RESULT line, and one LOST line per message that was
// confirmed and never consumed (its Send call, attempt and times relative
// to the start of stop_app / start_app). -raw replaces the sluice publisher
// and consumer by plain amqp091 ones (confirm mode, mandatory) on a queue
// of the same type.
//
//	go build -o /tmp/confirmloss ./tck/faults/cmd/confirmloss
//	/tmp/confirmloss -runs 3 -at 9.8s -atstep 50ms              # the reported scenario
//	/tmp/confirmloss -runs 4 -failbatch 0.2 -out /tmp/cl        # with requeues: loses on 3.10.8
//	/tmp/confirmloss -runs 2 -failbatch 0.2 -linger 210s        # ... and shows them come back ~3 min later
//	/tmp/confirmloss -raw -runs 3                               # amqp091 publisher and consumer
//
// It starts its own RabbitMQ node (adapters/amqp/rabbittest), which stops
// with it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"

	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

type config struct {
	n, rate, size, conc int
	sendTimeout         time.Duration
	at, atStep, down    time.Duration
	fault               string
	kills               []time.Duration
	queueType           string
	raw                 bool
	runs                int
	label               string
	out                 string
	urlParams           string
	deadline            time.Duration
	killPause           time.Duration
	linger              time.Duration
}

func main() {
	child := flag.String("child", "", "internal: run as the consumer child (sluice|raw)")
	url := flag.String("url", "", "internal: broker URL for the child")
	topic := flag.String("topic", "", "internal: topic (sluice) or queue (raw) for the child")
	flag.Float64Var(&failBatch, "failbatch", 0, "fraction of batches the consumer fails (requeued with backoff, as a busy database would)")

	var c config
	var kills string
	flag.IntVar(&c.n, "n", 20000, "messages")
	flag.IntVar(&c.rate, "rate", 1000, "messages per second")
	flag.IntVar(&c.size, "size", 20, "messages per Send call")
	flag.IntVar(&c.conc, "conc", 16, "Send calls in flight at most")
	flag.DurationVar(&c.sendTimeout, "sendtimeout", 5*time.Second, "timeout of one Send call")
	flag.DurationVar(&c.at, "at", 9800*time.Millisecond, "when the fault starts, from the first send")
	flag.DurationVar(&c.atStep, "atstep", 37*time.Millisecond, "added to -at on every run")
	flag.DurationVar(&c.down, "down", 5700*time.Millisecond, "stopapp: start_app this long after stop_app began")
	flag.StringVar(&c.fault, "fault", "stopapp", "stopapp | crash | none")
	flag.StringVar(&kills, "kills", "3s,8s,13s", "consumer SIGKILL times (empty: none)")
	flag.DurationVar(&c.killPause, "killpause", 0, "how long a killed consumer stays down before its restart (a backlog builds up)")
	flag.StringVar(&c.queueType, "queue", "quorum", "quorum | classic")
	flag.BoolVar(&c.raw, "raw", false, "plain amqp091 publisher and consumer instead of sluice")
	flag.IntVar(&c.runs, "runs", 1, "runs (one node)")
	flag.StringVar(&c.label, "label", "", "label printed on every RESULT line")
	flag.StringVar(&c.out, "out", "", "directory for per-message logs (JSONL), optional")
	flag.StringVar(&c.urlParams, "params", "", "extra amqp URL parameters (a=b&c=d)")
	flag.DurationVar(&c.deadline, "deadline", 55*time.Second, "bound of one run's publishing")
	flag.DurationVar(&c.linger, "linger", 0, "after the drain, keep a consumer this long and count what still arrives")
	flag.Parse()

	if *child != "" {
		var err error
		if *child == "raw" {
			err = rawConsume(*url, *topic)
		} else {
			err = consume(*url, *topic)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	for _, k := range strings.Split(kills, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		d, err := time.ParseDuration(k)
		if err != nil {
			fmt.Fprintln(os.Stderr, "-kills:", err)
			os.Exit(2)
		}
		c.kills = append(c.kills, d)
	}
	if err := parent(c); err != nil {
		fmt.Fprintln(os.Stderr, "confirmloss:", err)
		os.Exit(1)
	}
}

// ---- the consumer child ----

// failBatch is the fraction of batches whose write fails (-failbatch).
var failBatch float64

type reading struct {
	Seq    int     `json:"seq"`
	Device string  `json:"device"`
	Value  float64 `json:"value"`
}

// consume runs the sluice consumer: Decode → Batch → Sink; the sink writes
// the batch's ids to stdout (the parent) before returning nil, which acks
// the batch.
func consume(url, topic string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a, err := adapters.Open(ctx, url)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	out := bufio.NewWriter(os.Stdout)
	spec := adapters.Spec(a, ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: "ingest", InFlight: 256,
		Retry: ports.RetryPolicy{MaxAttempts: 1000, Backoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second}})
	var outMu sync.Mutex
	t0 := time.Now()
	note := func(format string, args ...any) { // a side line for the parent's event log
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "# %d %.3f "+format+"\n", append([]any{os.Getpid(), time.Since(t0).Seconds()}, args...)...)
		out.Flush()
	}
	p := flow.New(a, spec, flow.WithObserver(func(e flow.Event) {
		if e.Delivery == nil {
			return
		}
		switch {
		case e.Received:
			if e.Delivery.RedeliveryCount > 0 {
				note("received %s redeliveries=%d", e.Delivery.ID, e.Delivery.RedeliveryCount)
			}
		case e.Action != ports.Ack || e.Err != nil:
			note("settled %s action=%v err=%v", e.Delivery.ID, e.Action, e.Err)
		}
	}))
	vals := flow.Decode[reading](p.Source())
	batches := operators.Batch(vals, operators.BatchOptions{Size: 50, Window: 50 * time.Millisecond})
	flow.Sink(batches, func(_ context.Context, b operators.Batched[reading]) error {
		if failBatch > 0 && rand.Float64() < failBatch {
			ids := make([]string, len(b.Msgs))
			for i, d := range b.Msgs {
				ids[i] = d.ID
			}
			note("failbatch %s", strings.Join(ids, ","))
			return errors.New("database is locked (simulated)") // the batch is requeued
		}
		outMu.Lock()
		defer outMu.Unlock()
		for _, d := range b.Msgs {
			out.WriteString(d.ID)
			out.WriteByte('\n')
		}
		return out.Flush() // recorded (in the parent's pipe) before the ack
	})
	if err := p.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-p.Done():
		return fmt.Errorf("pipeline stopped: %v", p.Err())
	}
	return p.Stop(context.Background())
}

// rawConsume consumes queue with amqp091, writing each message id to stdout
// before acking it. It exits when the connection is lost.
func rawConsume(url, queue string) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(256, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	for d := range ds {
		out.WriteString(d.MessageId)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			return err
		}
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	return errors.New("deliveries closed")
}

// ---- the parent ----

type children struct {
	self, url, topic, mode string

	mu       sync.Mutex
	cmd      *exec.Cmd
	stopped  bool
	consumed map[string]int // id → deliveries recorded
	events   []string       // the children's side lines, with the run's time
	t0       time.Time
	last     time.Time
	starts   int
	wg       sync.WaitGroup
}

func (c *children) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.cmd != nil { // one consumer child at a time
		return nil
	}
	cmd := exec.Command(c.self, "-child", c.mode, "-url", c.url, "-topic", c.topic, "-failbatch", strconv.FormatFloat(failBatch, 'f', -1, 64))
	cmd.Stderr = io.Discard
	if os.Getenv("CONFIRMLOSS_CHILD_STDERR") != "" {
		cmd.Stderr = os.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd = cmd
	c.starts++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			if l := sc.Text(); strings.HasPrefix(l, "# ") {
				c.events = append(c.events, fmt.Sprintf("%.3f %s", time.Since(c.t0).Seconds(), l[2:]))
				c.mu.Unlock()
				continue
			}
			c.consumed[sc.Text()]++
			c.last = time.Now()
			c.mu.Unlock()
		}
		cmd.Wait()
		c.mu.Lock()
		again := !c.stopped && c.cmd == cmd
		if again {
			c.cmd = nil
		}
		c.mu.Unlock()
		if again { // it exited on its own (lost connection): restart it
			time.Sleep(200 * time.Millisecond)
			c.start()
		}
	}()
	return nil
}

// kill SIGKILLs the current child (by its PID) and starts a new one unless
// restart is false.
func (c *children) kill(restart bool) { c.killPaused(restart, 0) }

// killPaused is kill with a pause before the restart.
func (c *children) killPaused(restart bool, pause time.Duration) {
	c.mu.Lock()
	cmd := c.cmd
	c.cmd = nil
	if !restart {
		c.stopped = true
	}
	c.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Kill()
	}
	if restart {
		time.Sleep(pause)
		c.start()
	}
}

func (c *children) consumedCount(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumed[id]
}

func (c *children) idleSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

type attempt struct {
	Call    int     `json:"call"`
	Attempt int     `json:"attempt"`
	Start   float64 `json:"start"` // seconds from t0
	End     float64 `json:"end"`
	Err     string  `json:"err,omitempty"`
}

type msgState struct {
	ID        string    `json:"id"`
	Attempts  []attempt `json:"attempts"`
	Confirmed bool      `json:"confirmed"`
}

type faultTimes struct {
	stopBegin, stopEnd, startBegin, startEnd time.Duration
}

func parent(c config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	bctx, bcancel := context.WithTimeout(ctx, 4*time.Minute)
	node, err := rabbittest.Start(bctx, rabbittest.Options{StartTimeout: 4 * time.Minute})
	bcancel()
	if err != nil {
		return err
	}
	defer node.Stop()
	fmt.Printf("NODE %s pid=%d\n", node.URL, node.PID())
	var a ports.Adapter
	if !c.raw {
		u := node.URL + "?queue_type=" + c.queueType
		if c.urlParams != "" {
			u += "&" + c.urlParams
		}
		a, err = adapters.Open(ctx, u)
		if err != nil {
			return err
		}
		defer a.Close(context.Background())
	}
	for r := 0; r < c.runs && ctx.Err() == nil; r++ {
		at := c.at + time.Duration(r)*c.atStep
		if err := run(ctx, c, self, node, a, r, at); err != nil {
			fmt.Printf("RUNERR run=%d %v\n", r, err)
			// the node must be up for the next run
			sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
			node.StartApp(sctx)
			scancel()
		}
	}
	return nil
}

func run(ctx context.Context, c config, self string, node *rabbittest.Node, a ports.Adapter, r int, at time.Duration) error {
	id := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	topic := "confirmloss." + id
	childURL := node.URL + "?queue_type=" + c.queueType
	mode := "sluice"
	var rp *rawPublisher
	if c.raw {
		mode = "raw"
		var err error
		rp, err = newRawPublisher(node.URL, topic, c.queueType)
		if err != nil {
			return err
		}
		defer rp.close()
		childURL = node.URL
	} else {
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		err := ports.DeclareTopic(dctx, a, ports.TopicSpec{Topic: ports.Topic(topic), Groups: []string{"ingest"}})
		dcancel()
		if err != nil {
			return fmt.Errorf("declare: %w", err)
		}
	}
	ch := &children{self: self, url: childURL, topic: topic, mode: mode, consumed: map[string]int{}}
	if err := ch.start(); err != nil {
		return err
	}
	defer ch.kill(false)
	time.Sleep(time.Second) // the consumer subscribes

	msgs := make([]*msgState, c.n)
	for i := range msgs {
		msgs[i] = &msgState{ID: fmt.Sprintf("r%06d", i)}
	}
	payload := func(i int) []byte {
		b, _ := json.Marshal(reading{Seq: i, Device: fmt.Sprintf("d-%02d", i%10), Value: float64(i%97) / 3})
		return b
	}

	t0 := time.Now()
	ch.mu.Lock()
	ch.t0 = t0
	ch.mu.Unlock()
	since := func() float64 { return time.Since(t0).Seconds() }
	var ft faultTimes
	var ftMu sync.Mutex
	faultDone := make(chan struct{})
	go func() { // the fault
		defer close(faultDone)
		if c.fault == "none" {
			return
		}
		time.Sleep(time.Until(t0.Add(at)))
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer fcancel()
		ftMu.Lock()
		ft.stopBegin = time.Since(t0)
		ftMu.Unlock()
		switch c.fault {
		case "crash":
			err := node.Crash(fctx)
			ftMu.Lock()
			ft.stopEnd, ft.startBegin, ft.startEnd = ft.stopBegin, ft.stopBegin, time.Since(t0)
			ftMu.Unlock()
			if err != nil {
				fmt.Println("FAULTERR", err)
			}
		default:
			err := node.StopApp(fctx)
			ftMu.Lock()
			ft.stopEnd = time.Since(t0)
			ftMu.Unlock()
			if err != nil {
				fmt.Println("FAULTERR stop_app", err)
			}
			time.Sleep(time.Until(t0.Add(at + c.down)))
			ftMu.Lock()
			ft.startBegin = time.Since(t0)
			ftMu.Unlock()
			err = node.StartApp(fctx)
			ftMu.Lock()
			ft.startEnd = time.Since(t0)
			ftMu.Unlock()
			if err != nil {
				fmt.Println("FAULTERR start_app", err)
			}
		}
	}()
	go func() { // consumer kills
		for _, k := range c.kills {
			select {
			case <-time.After(time.Until(t0.Add(k))):
				ch.killPaused(true, c.killPause)
			case <-ctx.Done():
				return
			}
		}
	}()

	// The publisher: every size/rate, one Send call of the next messages
	// (failed ones first), at most conc calls in flight.
	var (
		qmu     sync.Mutex
		retry   []int
		nextNew int
		calls   atomic.Int64
		failed  atomic.Int64
		pending atomic.Int64 // messages not yet confirmed
		sendWG  sync.WaitGroup
	)
	pending.Store(int64(c.n))
	sem := make(chan struct{}, c.conc)
	interval := time.Duration(float64(time.Second) * float64(c.size) / float64(c.rate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	deadline := t0.Add(c.deadline)
	for pending.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		<-tick.C
		qmu.Lock()
		var batch []int
		for len(batch) < c.size && len(retry) > 0 {
			batch = append(batch, retry[0])
			retry = retry[1:]
		}
		for len(batch) < c.size && nextNew < c.n {
			batch = append(batch, nextNew)
			nextNew++
		}
		qmu.Unlock()
		if len(batch) == 0 {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-time.After(time.Until(deadline)):
			qmu.Lock()
			retry = append(batch, retry...)
			qmu.Unlock()
			continue
		}
		call := int(calls.Add(1))
		sendWG.Add(1)
		go func() {
			defer sendWG.Done()
			defer func() { <-sem }()
			start := since()
			sctx, scancel := context.WithTimeout(ctx, c.sendTimeout)
			var errs map[int]error
			if rp != nil {
				errs = rp.send(sctx, msgs, batch, payload)
			} else {
				ms := make([]ports.Message, len(batch))
				for j, i := range batch {
					ms[j] = ports.Message{Topic: ports.Topic(topic), Key: fmt.Sprintf("d-%02d", i%10), Payload: payload(i),
						Headers: ports.NewHeaders(ports.HeaderID, msgs[i].ID, ports.HeaderContentType, "application/json")}
				}
				err := a.Send(sctx, ms...)
				errs = map[int]error{}
				if err != nil {
					ses := ports.SendErrors(err)
					if len(ses) == 0 { // a whole-call error: nothing confirmed
						for j := range batch {
							errs[j] = err
						}
					}
					for _, se := range ses {
						errs[se.Index] = se.Err
					}
				}
			}
			scancel()
			end := since()
			qmu.Lock()
			for j, i := range batch {
				m := msgs[i]
				at := attempt{Call: call, Attempt: len(m.Attempts) + 1, Start: start, End: end}
				if e := errs[j]; e != nil {
					at.Err = e.Error()
					retry = append(retry, i)
					failed.Add(1)
				} else {
					m.Confirmed = true
					pending.Add(-1)
				}
				m.Attempts = append(m.Attempts, at)
			}
			qmu.Unlock()
		}()
	}
	sendWG.Wait()
	pubEnd := since()
	<-faultDone

	// A fresh consumer drains the group.
	ch.kill(true)
	drainStart := time.Now()
	for time.Since(drainStart) < 40*time.Second {
		time.Sleep(500 * time.Millisecond)
		if l := ch.idleSince(); time.Since(drainStart) > 5*time.Second && (l.IsZero() || time.Since(l) > 4*time.Second) {
			break
		}
	}
	if c.linger > 0 { // count what arrives late (stuck somewhere, e.g. in a delay queue)
		var lostNow []string
		for _, m := range msgs {
			if m.Confirmed && ch.consumedCount(m.ID) == 0 {
				lostNow = append(lostNow, m.ID)
			}
		}
		fmt.Printf("LINGER run=%d missing after the drain=%d; waiting %v\n", r, len(lostNow), c.linger)
		for end := time.Now().Add(c.linger); time.Now().Before(end); {
			time.Sleep(15 * time.Second)
			late := 0
			for _, id := range lostNow {
				if ch.consumedCount(id) > 0 {
					late++
				}
			}
			fmt.Printf("LINGER run=%d t=%.0fs arrived-late=%d of %d\n", r, since(), late, len(lostNow))
		}
	}
	ch.kill(false)
	waited := make(chan struct{})
	go func() { ch.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		fmt.Println("WARN a consumer child's output did not end")
	}
	ch.mu.Lock() // the readers may still run: read the map under its lock
	defer ch.mu.Unlock()
	qctx, qcancel := context.WithTimeout(ctx, 30*time.Second)
	queues, _ := node.Ctl(qctx, "list_queues", "-q", "name", "type", "messages")
	qcancel()
	var depth []string
	for _, l := range strings.Split(queues, "\n") {
		if f := strings.Fields(l); strings.Contains(l, id) || len(f) == 3 && f[2] != "0" {
			depth = append(depth, strings.Join(strings.Fields(l), " "))
		}
	}

	confirmed, consumed, lost, dup := 0, 0, 0, 0
	var lostMsgs []*msgState
	for _, m := range msgs {
		if m.Confirmed {
			confirmed++
		}
		if n := ch.consumed[m.ID]; n > 0 {
			consumed++
			if n > 1 {
				dup++
			}
		} else if m.Confirmed {
			lost++
			lostMsgs = append(lostMsgs, m)
		}
	}
	rel := func(t float64) string {
		return fmt.Sprintf("stop_app%+.3fs start_app%+.3fs", t-ft.stopBegin.Seconds(), t-ft.startBegin.Seconds())
	}
	fmt.Printf("RESULT label=%s failbatch=%g mode=%s fault=%s queue=%s run=%d at=%.3fs rate=%d size=%d conc=%d kills=%d n=%d calls=%d failedsends=%d confirmed=%d consumed=%d lost=%d redelivered=%d consumers=%d stop=[%.2f,%.2f] start=[%.2f,%.2f] pubend=%.2f queues=%q\n",
		c.label, failBatch, mode, c.fault, c.queueType, r, at.Seconds(), c.rate, c.size, c.conc, len(c.kills), c.n, calls.Load(), failed.Load(),
		confirmed, consumed, lost, dup, ch.starts, ft.stopBegin.Seconds(), ft.stopEnd.Seconds(), ft.startBegin.Seconds(), ft.startEnd.Seconds(), pubEnd, depth)
	for _, m := range lostMsgs {
		var b strings.Builder
		for _, at := range m.Attempts {
			res := "ok"
			if at.Err != "" {
				res = "err: " + at.Err
			}
			fmt.Fprintf(&b, " [call=%d attempt=%d start=%.3f (%s) end=%.3f %s]", at.Call, at.Attempt, at.Start, rel(at.Start), at.End, res)
		}
		fmt.Printf("LOST run=%d id=%s%s\n", r, m.ID, b.String())
	}
	if c.out != "" {
		os.MkdirAll(c.out, 0o755)
		f, err := os.Create(filepath.Join(c.out, fmt.Sprintf("%s-run%d-%s.jsonl", c.label, r, id)))
		if err == nil {
			enc := json.NewEncoder(f)
			enc.Encode(map[string]any{"stopBegin": ft.stopBegin.Seconds(), "stopEnd": ft.stopEnd.Seconds(), "startBegin": ft.startBegin.Seconds(), "startEnd": ft.startEnd.Seconds()})
			for _, m := range msgs {
				enc.Encode(struct {
					*msgState
					Consumed int `json:"consumed"`
				}{m, ch.consumed[m.ID]})
			}
			f.Close()
		}
		os.WriteFile(filepath.Join(c.out, fmt.Sprintf("%s-run%d-%s.events", c.label, r, id)), []byte(strings.Join(ch.events, "\n")+"\n"), 0o644)
	}
	return nil
}

// ---- the raw amqp091 publisher ----

type rawPublisher struct {
	url, queue string

	mu       sync.Mutex
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	returned sync.Map // message id → reply text
}

func newRawPublisher(url, queue, qtype string) (*rawPublisher, error) {
	p := &rawPublisher{url: url, queue: queue}
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": qtype}); err != nil {
		return nil, err
	}
	return p, nil
}

// channel returns the confirm channel, dialling again when it was lost.
// Called with p.mu held.
func (p *rawPublisher) channel() (*amqp091.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	if p.conn != nil {
		p.conn.Close()
	}
	conn, err := amqp091.DialConfig(p.url, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	rets := ch.NotifyReturn(make(chan amqp091.Return))
	go func() {
		for r := range rets {
			p.returned.Store(r.MessageId, r.ReplyText)
		}
	}()
	p.conn, p.ch = conn, ch
	return ch, nil
}

func (p *rawPublisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Close()
	}
}

// send publishes msgs[batch] (mandatory, persistent) and waits for each
// confirm. A returned message counts as failed.
func (p *rawPublisher) send(ctx context.Context, msgs []*msgState, batch []int, payload func(int) []byte) map[int]error {
	errs := map[int]error{}
	dcs := make([]*amqp091.DeferredConfirmation, len(batch))
	p.mu.Lock()
	ch, err := p.channel()
	for j, i := range batch {
		if err != nil {
			errs[j] = err
			continue
		}
		p.returned.Delete(msgs[i].ID)
		dcs[j], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", p.queue, true, false, amqp091.Publishing{
			MessageId: msgs[i].ID, DeliveryMode: amqp091.Persistent, ContentType: "application/json", Body: payload(i)})
		if err != nil {
			errs[j] = err
		}
	}
	p.mu.Unlock()
	for j, dc := range dcs {
		if dc == nil {
			continue
		}
		ok, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			errs[j] = err
		case !ok:
			errs[j] = errors.New("nack")
		}
	}
	time.Sleep(10 * time.Millisecond) // a return precedes its ack; let the listener store it
	for j, i := range batch {
		if errs[j] == nil {
			if txt, ok := p.returned.Load(msgs[i].ID); ok {
				errs[j] = fmt.Errorf("returned: %v", txt)
			}
		}
	}
	return errs
}
