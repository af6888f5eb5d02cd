// Command dlxprobe asks whether RabbitMQ itself keeps a confirmed message
// that goes through a delay queue (a quorum queue with x-message-ttl and
// at-least-once dead-lettering into an exchange, the shape sluice's amqp
// adapter uses for delayed requeues and sends) across a stop_app/start_app.
//
// With plain amqp091 only: messages are published with confirms (mandatory)
// into the delay queue at -rate; at -at the app is stopped, and started
// again -down later; at the end the target queue is drained and every
// confirmed id that never reached it is printed (LOST), with the delay
// queue's remaining depth.
//
//	go run ./tck/faults/cmd/dlxprobe
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

func main() {
	rate := flag.Int("rate", 200, "messages per second")
	dur := flag.Duration("for", 20*time.Second, "how long to publish")
	at := flag.Duration("at", 5*time.Second, "stop_app at")
	down := flag.Duration("down", 5*time.Second, "start_app this long after stop_app began")
	ttl := flag.Int("ttl", 200, "delay queue x-message-ttl (ms)")
	strategy := flag.String("strategy", "at-least-once", "x-dead-letter-strategy (at-least-once | at-most-once)")
	qtype := flag.String("delaytype", "quorum", "the delay queue's type")
	runs := flag.Int("runs", 1, "runs on one node")
	flag.IntVar(&queues, "queues", 1, "delay queues, published to in turn (many queues slow the recovery down)")
	flag.IntVar(&ballast, "ballast", 0, "idle quorum queues declared beside (a longer queue recovery)")
	flag.DurationVar(&linger, "linger", 0, "after the run, keep checking the target this long for late arrivals")
	flag.Parse()
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	node, err := rabbittest.Start(bctx, rabbittest.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer node.Stop()
	for r := 0; r < *runs; r++ {
		if err := run(node, r, *rate, *dur, *at, *down, *ttl, *strategy, *qtype); err != nil {
			fmt.Println("RUNERR", err)
		}
	}
}

var (
	ballast int
	queues  int
	linger  time.Duration
)

func run(node *rabbittest.Node, r, rate int, dur, at, down time.Duration, ttl int, strategy, qtype string) error {
	id := fmt.Sprintf("%d-%d", os.Getpid(), r)
	delayQ, targetQ, ex := "probe.delay."+id, "probe.target."+id, "probe.x."+id
	conn, err := amqp.Dial(node.URL)
	if err != nil {
		return err
	}
	ch, _ := conn.Channel()
	if err := ch.ExchangeDeclare(ex, "direct", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(targetQ, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return err
	}
	if err := ch.QueueBind(targetQ, "k", ex, false, nil); err != nil {
		return err
	}
	args := amqp.Table{"x-queue-type": qtype, "x-message-ttl": int64(ttl), "x-dead-letter-exchange": ex, "x-dead-letter-routing-key": "k"}
	if qtype == "quorum" {
		args["x-dead-letter-strategy"] = strategy
		args["x-overflow"] = "reject-publish"
	}
	for i := 0; i < ballast && r == 0; i++ {
		if _, err := ch.QueueDeclare(fmt.Sprintf("probe.ballast.%d", i), true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return err
		}
	}
	delays := make([]string, queues)
	for i := range delays {
		delays[i] = fmt.Sprintf("%s.%d", delayQ, i)
		if _, err := ch.QueueDeclare(delays[i], true, false, false, false, args); err != nil {
			return err
		}
	}
	conn.Close()

	var mu sync.Mutex
	confirmed := map[string]float64{}
	returned := map[string]bool{}
	t0 := time.Now()
	var stopB, stopE, startB, startE float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(at)
		fctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		stopB = time.Since(t0).Seconds()
		node.StopApp(fctx)
		stopE = time.Since(t0).Seconds()
		time.Sleep(time.Until(t0.Add(at + down)))
		startB = time.Since(t0).Seconds()
		node.StartApp(fctx)
		startE = time.Since(t0).Seconds()
	}()
	var pc *amqp.Connection
	var pch *amqp.Channel
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	seq := 0
	for time.Since(t0) < dur {
		<-tick.C
		if pch == nil || pch.IsClosed() {
			if pc != nil {
				pc.Close()
			}
			pc, err = amqp.DialConfig(node.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
			if err != nil {
				pch = nil
				continue
			}
			pch, _ = pc.Channel()
			if pch == nil || pch.Confirm(false) != nil {
				pch = nil
				continue
			}
			rets := pch.NotifyReturn(make(chan amqp.Return, 100))
			go func() {
				for rt := range rets {
					mu.Lock()
					returned[rt.MessageId] = true
					mu.Unlock()
				}
			}()
		}
		seq++
		mid := fmt.Sprintf("m%06d", seq)
		dc, err := pch.PublishWithDeferredConfirm("", delays[seq%len(delays)], true, false, amqp.Publishing{MessageId: mid, DeliveryMode: amqp.Persistent, Body: []byte(mid)})
		if err != nil {
			continue
		}
		sent := time.Since(t0).Seconds()
		go func() {
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if ok, err := dc.WaitContext(wctx); err == nil && ok {
				mu.Lock()
				confirmed[mid] = sent
				mu.Unlock()
			}
		}()
	}
	if pc != nil {
		pc.Close()
	}
	<-done
	time.Sleep(time.Duration(ttl)*time.Millisecond + 5*time.Second) // the last ones go through the delay
	// drain the target
	got := map[string]bool{}
	cc, err := amqp.Dial(node.URL)
	if err != nil {
		return err
	}
	defer cc.Close()
	cch, _ := cc.Channel()
	drain := func() { // what reached the target queue
		for {
			d, ok, err := cch.Get(targetQ, true)
			if err != nil || !ok {
				return
			}
			got[d.MessageId] = true
		}
	}
	held := func() int { // what the delay queues still count
		n := 0
		for _, q := range delays {
			dq, _ := cch.QueueDeclarePassive(q, true, false, false, false, args)
			n += dq.Messages
		}
		return n
	}
	drain()
	left := held()
	lateStart := time.Now()
	stuck := 0
	var stuckIDs []string
	for m := range confirmed {
		if !got[m] {
			stuck++
			stuckIDs = append(stuckIDs, m)
		}
	}
	sort.Strings(stuckIDs)
	if len(stuckIDs) > 0 {
		var b strings.Builder
		for i, m := range stuckIDs {
			if i < 30 {
				fmt.Fprintf(&b, " %s(confirmed,published@%.3fs,queue=%s)", m, confirmed[m], delays[mustAtoi(m[1:])%len(delays)])
			}
		}
		fmt.Printf("STUCK run=%d n=%d 5s after the publishing ended:%s\n", r, len(stuckIDs), b.String())
	}
	for linger > 0 && time.Since(lateStart) < linger && len(got) < seq {
		time.Sleep(15 * time.Second)
		drain()
		left2 := held()
		back := 0
		for _, m := range stuckIDs {
			if got[m] {
				back++
			}
		}
		fmt.Printf("LINGER run=%d after=%.0fs arrived=%d delayq_left=%d stuck-ones-arrived=%d of %d\n", r, time.Since(lateStart).Seconds(), len(got), left2, back, len(stuckIDs))
	}
	warns := strings.Count(node.LogTail(1<<22), "Cannot forward any dead-letter messages")
	mu.Lock()
	defer mu.Unlock()
	var lost []string
	for m := range confirmed {
		if !got[m] && !returned[m] {
			lost = append(lost, m)
		}
	}
	sort.Strings(lost)
	fmt.Printf("RESULT probe run=%d delaytype=%s strategy=%s ttl=%dms queues=%d published=%d confirmed=%d returned=%d stuck_after_5s=%d arrived=%d lost=%d delayq_left=%d dlx_warnings=%d stop=[%.2f,%.2f] start=[%.2f,%.2f]\n",
		r, qtype, strategy, ttl, len(delays), seq, len(confirmed), len(returned), stuck, len(got), len(lost), left, warns, stopB, stopE, startB, startE)
	var b strings.Builder
	for i, m := range lost {
		if i < 40 {
			fmt.Fprintf(&b, " %s@%.3f", m, confirmed[m])
		}
	}
	if len(lost) > 0 {
		fmt.Printf("LOST run=%d%s\n", r, b.String())
	}
	return nil
}

func mustAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
