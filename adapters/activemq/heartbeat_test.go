package activemq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// TestIdleSubscriptionKeepsItsConnection holds an idle pipeline for three
// and a half heart-beat intervals: its connection must stay up. ActiveMQ
// writes a heart-beat only when a check interval passed with nothing else
// written, so after the subscription's receipt the first beat comes two
// intervals later; a client that gave up after one interval (plus a
// second) redialled every idle connection, again and again.
func TestIdleSubscriptionKeepsItsConnection(t *testing.T) {
	const beat = 2 * time.Second
	a := newAdapter(t, activemq.Options{HeartBeat: beat})
	var mu sync.Mutex
	var errs []error
	p := flow.New(a, ports.SubscriptionSpec{Topic: "idle", Group: "g", InFlight: 4},
		flow.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(beat*3 + beat/2) // the time under test, not a synchronisation
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("an idle subscription reported %d error(s) in %v with %v heart-beats, first: %v", len(errs), beat*3+beat/2, beat, errs[0])
	}
}
