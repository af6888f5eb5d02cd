package kafkaqueue_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/ports"
)

// topicID returns the id of the physical topic.
func topicID(t *testing.T, b *broker, topic string) [16]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, b.client(t))
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return resp.Topics[0].TopicID
}

// receiveAll receives n deliveries of s within d, accepting each, and
// returns their ids.
func receiveAll(s ports.Subscription, n int, d time.Duration) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	got := map[string]bool{}
	for len(got) < n {
		ds, err := s.Receive(ctx, n)
		if err != nil {
			return got, fmt.Errorf("%d of %d received within %v: %w", len(got), n, d, err)
		}
		for _, x := range ds {
			got[x.ID] = true
		}
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			return got, err
		}
	}
	return got, nil
}

// In a share group with members, a topic's partitions start where the
// group's share.auto.offset.reset says when a member first fetches them.
// A DeclareGroup of another topic of the group, made while a member
// subscribed with StartEarliest is between its Subscribe and that first
// fetch (held here by the broker), must not move the start: the member
// receives what was published before its Subscribe.
func TestDeclareGroupLeavesAStartingMemberItsStart(t *testing.T) {
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("st", 2))
	subscribe(t, a, "first", "g") // the group has a member: no start offset can be set
	const n = 5
	for i := range n {
		send(t, a, "early", fmt.Sprint("e-", i))
	}
	early := topicID(t, b, "st.early")
	held, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	var holding atomic.Bool
	b.cluster.ControlKey(int16(kmsg.ShareFetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if slices.ContainsFunc(r.(*kmsg.ShareFetchRequest).Topics, func(t kmsg.ShareFetchRequestTopic) bool { return t.TopicID == early }) &&
			holding.CompareAndSwap(false, true) {
			b.cluster.DropControl()
			close(held)
			b.cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	type result struct {
		s   ports.Subscription
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "early", Group: "g", Start: ports.StartEarliest, InFlight: 8})
		done <- result{s, err}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("Subscribe returned (%v) before its member fetched from early", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the member on early sent no ShareFetch within 20 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ports.DeclareGroup(ctx, a, "late", "g"); err != nil {
		t.Fatal(err)
	}
	releaseOnce()
	var r result
	select {
	case r = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("Subscribe of early did not return within 45 s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
	if _, err := receiveAll(r.s, n, 10*time.Second); err != nil {
		t.Fatalf("StartEarliest member after a concurrent DeclareGroup: %v", err)
	}
}

// Members of one share group subscribing at once, each on a topic of its
// own, some from the oldest record and some from the end, each start where
// they asked (the group's share.auto.offset.reset is one for all topics):
// a StartEarliest member receives what was published before its
// Subscribe, any other what was published after it and nothing before.
func TestConcurrentStartsOfOneGroup(t *testing.T) {
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("cs", 2))
	subscribe(t, a, "first", "g")
	const topics, n = 8, 10
	errs := make(chan error, topics)
	for i := range topics {
		go func() {
			errs <- startAndReceive(a, ports.Topic(fmt.Sprint("t-", i)), i%2 == 0, n)
		}()
	}
	for range topics {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("a member neither received nor failed within 90 s")
		}
	}
}

// startAndReceive publishes n old records on topic, subscribes group g
// (StartEarliest if earliest), publishes n new ones and checks which come:
// all 2n from the oldest, else the n new ones.
func startAndReceive(a ports.Adapter, topic ports.Topic, earliest bool, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish := func(prefix string) error {
		for i := range n {
			id := fmt.Sprint(prefix, "-", topic, "-", i)
			if err := a.Send(ctx, ports.Message{Topic: topic, Key: id, Payload: []byte(id), Headers: ports.Headers{ports.HeaderID: id}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := publish("old"); err != nil {
		return err
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: "g", InFlight: 2 * n}
	want := n
	if earliest {
		spec.Start, want = ports.StartEarliest, 2*n
	}
	s, err := a.Subscribe(ctx, spec)
	if err != nil {
		return err
	}
	defer s.Stop(context.Background())
	if err := publish("new"); err != nil {
		return err
	}
	got, err := receiveAll(s, want, 20*time.Second)
	if err != nil {
		return fmt.Errorf("%s (StartEarliest %v): %w", topic, earliest, err)
	}
	for id := range got {
		if !earliest && id[:3] == "old" {
			return fmt.Errorf("%s started at its oldest record, not its end: received %s, published before Subscribe", topic, id)
		}
	}
	return nil
}
