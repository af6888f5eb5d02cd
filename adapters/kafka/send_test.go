package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// stored reads every record of the physical topic (all partitions, from
// the oldest offset to the high-water mark) and returns the payloads.
func (b *broker) stored(t *testing.T, topic string) map[string]int {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient(b.addrs, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range parts {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm <= oldest {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, oldest)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for next := oldest; next < hwm; {
			select {
			case m := <-pc.Messages():
				out[string(m.Value)]++
				next = m.Offset + 1
			case <-timeout:
				t.Fatalf("read %s/%d up to %d of %d within 10s", topic, p, next, hwm)
			}
		}
		_ = pc.Close()
	}
	return out
}

func numbered(topic ports.Topic, n int) []ports.Message {
	msgs := make([]ports.Message, n)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: topic, Payload: fmt.Appendf(nil, "m%04d", i)}
	}
	return msgs
}

// TestSendCancelledPublishesNothing: a Send with a ctx that is already
// cancelled publishes nothing and names every message (issue: kafka used
// to publish 1 of 20 now and then).
func TestSendCancelledPublishesNothing(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("sc", 4))
	send(t, a, "t", nil, "warm-up") // the topic exists, the producer is connected
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for round := range 20 {
		msgs := numbered("t", 20)
		err := a.Send(ctx, msgs...)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: Send with a cancelled ctx returned %v, want context.Canceled", round, err)
		}
		if un := tck.UnconfirmedIndexes(err, len(msgs)); len(un) != len(msgs) {
			t.Fatalf("round %d: the error names %d of %d messages, want all: %v", round, len(un), len(msgs), err)
		}
	}
	got := b.stored(t, "sc.t")
	delete(got, "warm-up")
	if len(got) != 0 {
		t.Fatalf("a Send with a cancelled ctx published %d message(s): %v", len(got), got)
	}
}

// TestSendCancelledMidwayNamesTheUnconfirmed: a Send cancelled midway
// reports exactly which messages were confirmed: every message it does not
// name is stored on the broker. The deadline doubles until some messages
// are confirmed, then is bisected between the last deadline that
// confirmed none and the first that confirmed all (confirms come a
// partition batch at a time, so the window of a cut is narrow), until a
// Send is cut with some messages confirmed and some not; every attempt is
// checked.
func TestSendCancelledMidwayNamesTheUnconfirmed(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("sm", 4))
	send(t, a, "t", nil, "warm-up")
	const n = 2000
	cut := false
	var none, all time.Duration // the longest deadline that confirmed none, the shortest that confirmed all
	for round, d := 0, time.Millisecond; !cut && round < 24 && d < 5*time.Second; round++ {
		msgs := numbered("t", n)
		for i := range msgs {
			msgs[i].Payload = fmt.Appendf(nil, "r%d-%04d", round, i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := a.Send(ctx, msgs...)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send cancelled after %v: %v, want only context.DeadlineExceeded errors", d, err)
		}
		un := tck.UnconfirmedIndexes(err, n)
		got := b.stored(t, "sm.t")
		confirmed, storedUnconfirmed := 0, 0
		for i, m := range msgs {
			switch {
			case !un[i] && got[string(m.Payload)] == 0:
				t.Fatalf("deadline %v: message %d is not named in the error (confirmed) but is not stored", d, i)
			case !un[i]:
				confirmed++
			case got[string(m.Payload)] > 0:
				storedUnconfirmed++
			}
		}
		t.Logf("deadline %v: of %d, %d confirmed (all stored), %d named unconfirmed, of which %d were stored anyway", d, n, confirmed, len(un), storedUnconfirmed)
		cut = confirmed > 0 && confirmed < n
		switch {
		case confirmed == 0:
			none = max(none, d)
		case confirmed == n && (all == 0 || d < all):
			all = d
		}
		if d = 2 * d; all > 0 {
			d = none + (all-none)/2
		}
	}
	if !cut {
		t.Fatal("no deadline cut a Send midway (some confirmed, some not)")
	}
}
