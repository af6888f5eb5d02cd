package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// faultRun streams n messages through one adapter (confirmed sends retried
// until confirmed, a pipeline consuming them) and injects a fault after a
// third of them, while hold deliveries are held pending in their handlers.
// It checks what the settlement contract promises under failure:
//
//   - nothing lost: every message whose send was confirmed is handled;
//   - nothing acked that was not completed: the held deliveries, whose
//     completions were pending when the channel died, come back (the
//     broker redelivers them) and their late settlement fails;
//   - the failure is surfaced on the subscription's error channel;
//   - duplicates are expected and counted.
type faultRun struct {
	t     *testing.T
	a     *amqp.Adapter
	topic ports.Topic
	group string
	n     int
	hold  int

	mu        sync.Mutex
	handled   map[string]int
	held      map[string]bool
	holding   bool
	heldReady chan struct{} // closed when hold handlers are blocked
	release   chan struct{}
	afterHeld chan struct{} // closed when a delivery is handled after release
	confirmed map[string]bool
	sendFails int
	errs      []error
}

func newFaultRun(t *testing.T, url string, n, hold int) *faultRun {
	a := newAdapter(t, amqp.Options{
		URL:                 url,
		Namespace:           namespace("fault"),
		DialTimeout:         2 * time.Second,
		ReconnectBackoff:    50 * time.Millisecond,
		ReconnectMaxBackoff: 500 * time.Millisecond,
	})
	return &faultRun{
		t: t, a: a, topic: "fault.stream", group: "g", n: n, hold: hold,
		handled: map[string]int{}, held: map[string]bool{}, confirmed: map[string]bool{},
		heldReady: make(chan struct{}), release: make(chan struct{}), afterHeld: make(chan struct{}),
	}
}

func (r *faultRun) spec() ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: r.topic, Group: r.group, InFlight: 32,
		Retry: ports.RetryPolicy{MaxAttempts: -1, NoBackoff: true}}
}

// handle records a delivery; while holding, it blocks the first hold
// deliveries until release.
func (r *faultRun) handle(ctx context.Context, d *ports.Delivery) error {
	r.mu.Lock()
	r.handled[d.ID]++
	hold := r.holding && len(r.held) < r.hold
	if hold {
		r.held[d.ID] = true
		if len(r.held) == r.hold {
			close(r.heldReady)
			r.holding = false
		}
	}
	released := false
	select {
	case <-r.release:
		released = true
	default:
	}
	// Under load the fault (a broker restart) can outlast the whole
	// stream: the rest of the messages, and the held ones redelivered on
	// the new channel, may all be handled before release. Every held
	// message handled again proves delivery after the fault as well.
	redelivered := len(r.held) == r.hold
	for id := range r.held {
		if r.handled[id] < 2 {
			redelivered = false
			break
		}
	}
	r.mu.Unlock()
	if released || redelivered {
		r.once(r.afterHeld)
	}
	if !hold {
		return nil
	}
	select {
	case <-r.release:
		return nil // a success that comes too late to be settled
	case <-ctx.Done():
		return ctx.Err()
	}
}

var closeMu sync.Mutex

func (r *faultRun) once(c chan struct{}) {
	closeMu.Lock()
	defer closeMu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// send sends message i until it is confirmed, or the deadline passes.
func (r *faultRun) send(ctx context.Context, i int) error {
	id := fmt.Sprintf("m-%05d", i)
	for {
		m := ports.Message{Topic: r.topic, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: ports.NewHeaders(ports.HeaderID, id)}
		err := r.a.Send(ctx, m)
		if err == nil {
			r.mu.Lock()
			r.confirmed[id] = true
			r.mu.Unlock()
			return nil
		}
		r.mu.Lock()
		r.sendFails++
		r.mu.Unlock()
		if ctx.Err() != nil {
			return fmt.Errorf("message %s never confirmed: %w", id, err)
		}
		t := time.NewTimer(20 * time.Millisecond) // retry pacing while the broker is away
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// run streams the messages, calls fault once a third are confirmed and
// the held deliveries are blocked, and checks the outcome.
func (r *faultRun) run(fault func(), recovered func() error) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p := flow.New(r.a, r.spec(), flow.WithDrainTimeout(0), flow.WithErrorHandler(func(err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}))
	flow.Sink(p.Source(), r.handle, flow.Workers(32))
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := range r.n {
			if i == r.n/3 {
				r.mu.Lock()
				r.holding = true
				r.mu.Unlock()
			}
			if err := r.send(ctx, i); err != nil {
				sent <- err
				return
			}
			if i >= r.n/3 {
				// Pace the rest so that sends overlap the fault.
				t := time.NewTimer(3 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
		}
		sent <- nil
	}()
	select {
	case <-r.heldReady:
	case <-ctx.Done():
		t.Fatalf("the %d held deliveries never arrived", r.hold)
	}
	fault()
	if recovered != nil {
		if err := recovered(); err != nil {
			t.Fatal(err)
		}
	}
	close(r.release)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.afterHeld:
	case <-ctx.Done():
		r.mu.Lock()
		errs := append([]error(nil), r.errs...)
		r.mu.Unlock()
		if len(errs) > 6 {
			errs = errs[len(errs)-6:]
		}
		t.Fatalf("nothing was delivered after the fault; pipeline %+v; last errors reported: %v", p.Stats(), errs)
	}
	r.waitAllHandled(ctx, p)
	stop(t, p)

	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.held {
		if r.handled[id] < 2 {
			t.Errorf("held message %s handled %d times: its completion was pending when the channel died, so it must come back (no ack happened)", id, r.handled[id])
		}
	}
	s := p.Stats()
	if s.SettleErrors < int64(r.hold) {
		t.Errorf("%d settle errors, want at least %d (the held deliveries' late successes must not settle)", s.SettleErrors, r.hold)
	}
	lostReported := false
	for _, err := range r.errs {
		if strings.Contains(err.Error(), "lost its channel") {
			lostReported = true
		}
	}
	if !lostReported {
		t.Errorf("the lost channel was not reported on the error channel; errors: %v", r.errs)
	}
	dups := 0
	for _, c := range r.handled {
		dups += c - 1
	}
	for i, err := range r.errs {
		if i < 4 {
			t.Logf("reported: %v", err)
		}
	}
	t.Logf("%d messages confirmed (%d send attempts failed and were retried), %d handled, %d duplicate deliveries, %d settle errors, %d errors reported",
		len(r.confirmed), r.sendFails, len(r.handled), dups, s.SettleErrors, len(r.errs))

	// Nothing is left unsettled on the broker: a fresh consumer of the
	// group stays idle.
	again := flow.New(r.a, r.spec(), flow.WithDrainTimeout(0))
	extra := make(chan string, 16)
	flow.Sink(again.Source(), func(_ context.Context, d *ports.Delivery) error {
		extra <- d.ID
		return nil
	})
	if err := again.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer stop(t, again)
	select {
	case id := <-extra:
		t.Errorf("message %s was still on the queue after every message was handled and settled", id)
	case <-time.After(500 * time.Millisecond): // a quiet window
	}
}

func (r *faultRun) waitAllHandled(ctx context.Context, p *flow.Pipeline) {
	for {
		r.mu.Lock()
		missing := 0
		for id := range r.confirmed {
			if r.handled[id] == 0 {
				missing++
			}
		}
		heldBack := 0
		for id := range r.held {
			if r.handled[id] < 2 {
				heldBack++
			}
		}
		r.mu.Unlock()
		if missing == 0 && heldBack == 0 && p.Stats().InFlight == 0 {
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("%d confirmed messages never handled, %d held messages never redelivered (stats %+v)", missing, heldBack, p.Stats())
		case <-time.After(10 * time.Millisecond): // polling counters, bounded by ctx
		}
	}
}

func stop(t *testing.T, p *flow.Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Errorf("stop pipeline: %v", err)
	}
}

// TestFaultBrokerRestartMidStream restarts the RabbitMQ application
// (rabbitmqctl stop_app, start_app) in the middle of a stream.
func TestFaultBrokerRestartMidStream(t *testing.T) {
	node := rabbittest.Own(t, rabbittest.Options{})
	r := newFaultRun(t, node.URL, 600, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.run(func() {
		if err := node.StopApp(ctx); err != nil {
			t.Fatal(err)
		}
		if err := node.StartApp(ctx); err != nil {
			t.Fatal(err)
		}
	}, nil)
}

// TestFaultTCPCut cuts every connection of the adapter through a loopback
// proxy, twice: once with immediate reconnects, once while the proxy
// refuses connections for a while (so reconnect attempts fail and are
// reported) before it lets them through again.
func TestFaultTCPCut(t *testing.T) {
	proxy := sharedProxy(t)
	r := newFaultRun(t, proxy.URL(), 600, 8)
	r.run(func() {
		proxy.SetRefusing(true)
		if n := proxy.Cut(); n < 2 {
			t.Errorf("cut %d connections, want the publish and the consume connection", n)
		}
	}, func() error {
		// Wait until a reconnect attempt failed and was reported, then
		// let connections through again.
		deadline := time.Now().Add(30 * time.Second)
		for {
			r.mu.Lock()
			failed := false
			for _, err := range r.errs {
				// The loss is attempt 1; attempt 2 is a failed reconnect.
				if strings.Contains(err.Error(), "(attempt 2)") {
					failed = true
				}
			}
			r.mu.Unlock()
			if failed {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("no failed reconnect attempt was reported while the proxy refused connections")
			}
			time.Sleep(10 * time.Millisecond) // polling a log, bounded
		}
		proxy.SetRefusing(false)
		return nil
	})
}
