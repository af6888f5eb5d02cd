package mem_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func bc(topic, instance string, ttl time.Duration) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: ports.Topic(topic), Mode: ports.Broadcast, Group: "cache", Instance: instance, InstanceTTL: ttl}
}

func TestBroadcastEveryInstanceGetsEveryMessage(t *testing.T) {
	b := newBroker(t)
	a1, a2 := newAdapter(t, b), newAdapter(t, b)
	s1 := subscribe(t, a1, bc("prices", "", 0))
	s2 := subscribe(t, a2, bc("prices", "", 0))
	send(t, a1, "prices", "1", "2", "3")
	for i, s := range []ports.Subscription{s1, s2} {
		ds := receive(t, s, 3)
		if got := payloads(ds); !slices.Equal(got, []string{"1", "2", "3"}) {
			t.Fatalf("instance %d got %v", i, got)
		}
		if ds[0].Facts.Get("instance") == "" {
			t.Errorf("instance %d: no instance fact in %v", i, ds[0].Facts)
		}
		settle(t, s, ack, ds...)
	}
	if n := len(b.Stats().Queues); n != 2 {
		t.Fatalf("%d queues, want one per instance", n)
	}
}

func TestBroadcastWithoutTTLIsDeletedAtStop(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, bc("prices", "i1", 0))
	send(t, a, "prices", "1")
	receive(t, s, 1) // unsettled: Stop hands it back, then the queue goes
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Stats().Queue("", "prices", "cache", "i1"); ok {
		t.Fatal("broadcast queue without TTL outlived its instance")
	}
	if err := a.Send(context.Background(), ports.Message{Topic: "prices", Payload: []byte("2")}); !errors.Is(err, ports.ErrNoSubscriber) {
		t.Fatalf("Send with the only queue gone = %v, want ErrNoSubscriber", err)
	}
	s2 := subscribe(t, a, bc("prices", "i1", 0))
	receiveBlocked(t, s2)
}

func TestBroadcastTTLKeepsThenExpires(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	const ttl = time.Minute
	stop := func(s ports.Subscription) {
		t.Helper()
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	s := subscribe(t, a, bc("prices", "i1", ttl))
	stop(s)
	send(t, a, "prices", "while-away")
	clock.Advance(ttl - time.Second)
	q, ok := b.Stats().Queue("", "prices", "cache", "i1")
	if !ok || q.Ready != 1 {
		t.Fatalf("queue within TTL: %+v %v, want kept with the message", q, ok)
	}

	// Rejoining resumes the instance's own copy and cancels the expiry.
	s = subscribe(t, a, bc("prices", "i1", ttl))
	clock.Advance(2 * time.Second) // past the first expiry's deadline
	if got := payloads(receive(t, s, 1)); got[0] != "while-away" {
		t.Fatalf("resumed instance got %v", got)
	}
	stop(s)
	if _, ok := b.Stats().Queue("", "prices", "cache", "i1"); !ok {
		t.Fatal("queue deleted although its TTL had not passed since the last Stop")
	}
	clock.Advance(ttl)
	if _, ok := b.Stats().Queue("", "prices", "cache", "i1"); ok {
		t.Fatal("idle queue not deleted after its TTL")
	}
	if st := b.Stats(); st.Scheduled != 0 {
		t.Fatalf("%d scheduler entries left", st.Scheduled)
	}
}

func TestLoadBalanceQueueIgnoresTTL(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	spec := lb("orders", "g")
	spec.InstanceTTL = time.Second
	s := subscribe(t, a, spec)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, ok := b.Stats().Queue("", "orders", "g", ""); !ok {
		t.Fatal("LoadBalance queue expired; groups are durable")
	}
}
