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
	// franz-go sends ShareFetch on a connection of its own, so the
	// DeclareGroup below passes while this one is held.
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

// Watermill's universal suite, in small: members of one share group that
// has members already, each on a topic of its own, each declaring the
// group on its topic, publishing and subscribing from the oldest record
// at the same time, each receive what was published before their
// Subscribe and after it.
func TestConcurrentStartsOfOneGroup(t *testing.T) {
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("cs", 2))
	subscribe(t, a, "first", "g")
	const topics, n = 10, 10
	errs := make(chan error, topics)
	for i := range topics {
		go func() { errs <- startAndReceive(a, ports.Topic(fmt.Sprint("t-", i)), n) }()
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

// startAndReceive declares group g on topic, publishes n records,
// subscribes from the oldest record, publishes n more and receives all 2n.
func startAndReceive(a ports.Adapter, topic ports.Topic, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ports.DeclareGroup(ctx, a, topic, "g"); err != nil {
		return err
	}
	publish := func(prefix string) error {
		for i := range n {
			id := fmt.Sprint(prefix, "-", topic, "-", i)
			if err := a.Send(ctx, ports.Message{Topic: topic, Key: id, Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := publish("before"); err != nil {
		return err
	}
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: "g", Start: ports.StartEarliest, InFlight: 2 * n})
	if err != nil {
		return err
	}
	defer s.Stop(context.Background())
	if err := publish("after"); err != nil {
		return err
	}
	if _, err := receiveAll(s, 2*n, 20*time.Second); err != nil {
		return fmt.Errorf("%s: %w", topic, err)
	}
	return nil
}
