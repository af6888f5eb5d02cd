package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// TestDelayedRequeueAcrossStopApp: a handler fails the first delivery of
// every message, so the pipeline requeues each one with a 0.5–1.5 s
// backoff. While the requeues wait, RabbitMQ is restarted (stop_app, 3 s
// down, start_app). Every message was confirmed by Send, so every message
// must come back and be handled within the bound.
//
// It failed when a delayed requeue was a confirmed copy in one of the
// adapter's delay queues (quorum queues dead-lettering at least once into
// the topics exchange): RabbitMQ recovers a delay queue before the
// exchanges, its dead-letter worker logs "Cannot forward any dead-letter
// messages ... exchange ... does not exist" and holds every copy for
// dead_letter_worker_publisher_confirm_timeout (180 s), so they looked
// lost. Whether a delay queue comes up before the exchanges is a race (150
// idle quorum queues make the recovery longer, jitter spreads the copies
// over many delay queues); it lost in the first round every time. The
// requeue is now held by the portable layer and its copy published
// straight to the group's queue when due. CONFIRMLOSS_DLX_RETRY_MS sets
// the broker's retry timeout, for diagnosis.
func TestDelayedRequeueAcrossStopApp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	node := rabbittest.Own(t, rabbittest.Options{})
	if ms := os.Getenv("CONFIRMLOSS_DLX_RETRY_MS"); ms != "" {
		// Diagnosis: RabbitMQ's dead-letter worker retries what it holds
		// every dead_letter_worker_publisher_confirm_timeout (180 s by
		// default); shortened, the held copies come back within the test.
		if out, err := node.Ctl(ctx, "eval", "application:set_env(rabbit, dead_letter_worker_publisher_confirm_timeout, "+ms+")."); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	a, err := adapters.Open(ctx, node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	// Many quorum queues make the broker's queue recovery long enough for
	// the race to show: the queues of a topic with 150 groups.
	groups := make([]string, 150)
	for i := range groups {
		groups[i] = fmt.Sprintf("idle%03d", i)
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "delayrestart.ballast", Groups: groups}); err != nil {
		t.Fatal(err)
	}

	for round := range 2 {
		if !delayedRequeueRound(ctx, t, node, a, round) {
			return
		}
	}
}

// delayedRequeueRound runs one round on a new topic; false when it failed.
func delayedRequeueRound(ctx context.Context, t *testing.T, node *rabbittest.Node, a ports.Adapter, round int) bool {
	const n = 400
	topic := ports.Topic(fmt.Sprintf("delayrestart.%d.%d", time.Now().UnixNano()%1e6, round))
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: topic, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		failed  = map[string]bool{} // first delivery seen and failed
		handled = map[string]bool{} // a later delivery handled
	)
	spec := adapters.Spec(a, ports.SubscriptionSpec{Topic: topic, Group: "g", InFlight: 256,
		Retry: ports.RetryPolicy{MaxAttempts: 100, Backoff: time.Second, MaxBackoff: time.Second, Jitter: 0.5}})
	p := flow.New(a, spec)
	flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed[d.ID] {
			failed[d.ID] = true
			return errors.New("not yet") // requeued through the delay queue
		}
		handled[d.ID] = true
		return nil
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())

	for i := 0; i < n; i += 20 {
		msgs := make([]ports.Message, 20)
		for j := range msgs {
			msgs[j] = ports.Message{Topic: topic, Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, fmt.Sprintf("m%d-%04d", round, i+j))}
		}
		if err := a.Send(ctx, msgs...); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	count := func(m map[string]bool) int {
		mu.Lock()
		defer mu.Unlock()
		return len(m)
	}
	// Restart while the last copies wait in the delay queue: when half of
	// the messages were requeued once.
	for deadline := time.Now().Add(30 * time.Second); count(failed) < n/2; {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: only %d of %d first deliveries in 30 s", round, count(failed), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	if err := node.StopApp(sctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the waiting copies expire while the app is down
	if err := node.StartApp(sctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); count(handled) < n && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if got := count(handled); got < n {
		queues, _ := node.Ctl(ctx, "list_queues", "-q", "name", "type", "messages")
		var stuck []string
		for _, l := range strings.Split(queues, "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[2] != "0" {
				stuck = append(stuck, l)
			}
		}
		var warns []string
		for _, l := range strings.Split(node.LogTail(1<<22), "\n") {
			if strings.Contains(l, "Cannot forward any dead-letter messages") {
				warns = append(warns, l)
			}
		}
		t.Errorf("round %d: %d of %d messages (every one confirmed by Send, its requeue copy confirmed too) were not handled within 60 s after start_app; first deliveries %d\nqueues holding messages: %q\nbroker: %s",
			round, n-got, n, count(failed), stuck, strings.Join(warns, "\n"))
		return false
	}
	t.Logf("round %d: %d of %d handled after the restart", round, count(handled), n)
	return true
}
