package mem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestSendStampsAndCopies(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))

	headers := ports.NewHeaders(ports.HeaderType, "order.v1", "x-user", "u1")
	payload := []byte(`{"n":1}`)
	msg := ports.Message{Topic: "orders", Key: "k1", Payload: payload, Headers: headers}
	if err := a.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X' // the caller reuses its buffer
	headers.Set("x-user", "changed")

	if len(headers) != 2 || headers.Get(ports.HeaderID) != "" {
		t.Fatalf("Send modified the caller's headers: %v", headers)
	}
	d := receive(t, s, 1)[0]
	if string(d.Payload) != `{"n":1}` {
		t.Errorf("payload = %q, want the bytes as sent", d.Payload)
	}
	want := ports.NewHeaders(ports.HeaderType, "order.v1", "x-user", "u1", ports.HeaderID, d.ID, ports.HeaderPartitionKey, "k1")
	if !d.Headers.Equal(want) {
		t.Errorf("headers %v, want %v: the sender's, the id and the partition key, nothing else", d.Headers, want)
	}
	if d.ID == "" || d.ID != d.Headers.Get(ports.HeaderID) {
		t.Errorf("ID = %q, header %q: want the stamped id in both", d.ID, d.Headers.Get(ports.HeaderID))
	}
}

func TestSendKeepsGivenID(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	msg := ports.Message{Topic: "orders", Headers: ports.NewHeaders(ports.HeaderID, "my-id")}
	if err := a.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, s, 1)[0]; d.ID != "my-id" {
		t.Fatalf("ID = %q, want my-id", d.ID)
	}
}

func TestSendReportsInvalidMessagesOnly(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))

	err := a.Send(context.Background(),
		ports.Message{Topic: "orders", Payload: []byte("a")},
		ports.Message{Topic: "bad topic", Payload: []byte("b")},
		ports.Message{Topic: "orders", Payload: []byte("c"), Delay: -time.Second},
		ports.Message{Topic: "orders", Payload: []byte("d")},
	)
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	var indexes []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *ports.SendError
		if !errors.As(e, &se) {
			t.Fatalf("joined error %v is not a *SendError", e)
		}
		indexes = append(indexes, se.Index)
	}
	if len(indexes) != 2 || indexes[0] != 1 || indexes[1] != 2 {
		t.Fatalf("failed indexes = %v, want [1 2]", indexes)
	}
	if got := payloads(receive(t, s, 2)); got[0] != "a" || got[1] != "d" {
		t.Fatalf("delivered %v, want the two valid messages [a d]", got)
	}
}

func TestFailSendsIsUnconfirmedAndStoresNothing(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))

	b.FailSends(true)
	err := a.Send(context.Background(), ports.Message{Topic: "orders"}, ports.Message{Topic: "orders"})
	var se *ports.SendError
	if !errors.Is(err, ports.ErrUnconfirmed) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want *SendError wrapping ErrUnconfirmed", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 2 {
		t.Fatalf("%d send errors, want 2", n)
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("%d messages stored by failed sends", q.Ready)
	}

	b.FailSends(false)
	send(t, a, "orders", "ok")
	if got := payloads(receive(t, s, 1)); got[0] != "ok" {
		t.Fatalf("got %v", got)
	}
}

func TestSendWithDoneContext(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	subscribe(t, a, lb("orders", "g"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := a.Send(ctx, ports.Message{Topic: "orders"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("message stored despite a done context")
	}
}

func TestSendToTopicWithoutQueueFailsWithErrNoSubscriber(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	err := a.Send(context.Background(), ports.Message{Topic: "orders", Payload: []byte("early")})
	if !errors.Is(err, ports.ErrNoSubscriber) {
		t.Fatalf("Send before any subscription = %v, want ErrNoSubscriber (never a silent drop)", err)
	}
	if se := ports.SendErrors(err); len(se) != 1 || se[0].Index != 0 {
		t.Fatalf("SendErrors = %v, want the one message", se)
	}
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "late")
	if got := payloads(receive(t, s, 1)); got[0] != "late" {
		t.Fatalf("got %v, want only the message sent after the first Subscribe", got)
	}
}

func TestDeclareGroupKeepsMessagesBeforeTheFirstConsumer(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	if err := ports.DeclareGroup(context.Background(), a, "orders", "g"); err != nil {
		t.Fatal(err)
	}
	if err := ports.DeclareGroup(context.Background(), a, "orders", "g"); err != nil {
		t.Fatalf("second DeclareGroup: %v (must be idempotent)", err)
	}
	send(t, a, "orders", "early")
	s := subscribe(t, a, lb("orders", "g"))
	if got := payloads(receive(t, s, 1)); got[0] != "early" {
		t.Fatalf("got %v, want the message sent after DeclareGroup", got)
	}
}

func TestClosed(t *testing.T) {
	b := newBroker(t)
	a1 := newAdapter(t, b)
	a2 := newAdapter(t, b)
	ctx := context.Background()

	if err := a1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a1.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a1.Send(ctx, ports.Message{Topic: "t"}); !errors.Is(err, ports.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := a1.Subscribe(ctx, lb("t", "g")); !errors.Is(err, ports.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	send(t, a2, "t") // the broker lives on for other adapters

	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a2.Send(ctx, ports.Message{Topic: "t"}); !errors.Is(err, ports.ErrClosed) {
		t.Errorf("Send after broker Close: %v, want ErrClosed", err)
	}
	if _, err := a2.Subscribe(ctx, lb("t", "g")); !errors.Is(err, ports.ErrClosed) {
		t.Errorf("Subscribe after broker Close: %v, want ErrClosed", err)
	}
	if _, err := mem.New(b); !errors.Is(err, ports.ErrClosed) {
		t.Errorf("New on a closed broker: %v, want ErrClosed", err)
	}
}
