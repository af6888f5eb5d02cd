package ports

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoSubscriber is returned (inside a *SendError) by an adapter that
// would otherwise drop a message because no subscription and no declared
// group exists for its topic yet, such as the in-process mem broker. The
// message was not stored. Subscribe first (flow's Pipeline.Start returns
// once the subscription exists) or declare the group ahead with
// DeclareGroup.
var ErrNoSubscriber = errors.New("no subscription or declared group for the topic: the message was not stored (start the consumer first, or declare its group with ports.DeclareGroup)")

// GroupDeclarer is implemented by adapters that can create a LoadBalance
// group's queue before its first consumer runs, so that messages published
// from then on are kept for the group (the equivalent of Watermill's
// SubscribeInitialize). Brokers whose groups keep everything published to
// the topic anyway (Kafka from the earliest offset, Pulsar with a durable
// subscription created on first use) need not implement it.
type GroupDeclarer interface {
	// DeclareGroup creates the group's queue for topic if it does not
	// exist yet. It is idempotent and does not start a consumer.
	DeclareGroup(ctx context.Context, topic Topic, group string) error
}

// DeclareGroup declares group on topic ahead of its first consumer when a
// (or an adapter it wraps) is a GroupDeclarer, and returns an error
// wrapping ErrUnsupported otherwise.
func DeclareGroup(ctx context.Context, a Adapter, topic Topic, group string) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	if group == "" {
		return &ValueError{Field: "group", Reason: "is required to declare a group"}
	}
	for x := a; x != nil; {
		if d, ok := x.(GroupDeclarer); ok {
			return d.DeclareGroup(ctx, topic, group)
		}
		w, ok := x.(interface{ Unwrap() Adapter })
		if !ok {
			break
		}
		x = w.Unwrap()
	}
	name := "nil adapter"
	if a != nil {
		name = a.Name()
	}
	return fmt.Errorf("%w: %s cannot declare a group ahead of its first consumer", ErrUnsupported, name)
}

// SendErrors returns every *SendError inside err (a Send's result joins
// one per failed message with errors.Join, which errors.As alone does not
// walk past its first), in the order found. It returns nil when err holds
// none.
func SendErrors(err error) []*SendError {
	var out []*SendError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if se, ok := e.(*SendError); ok {
			out = append(out, se)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
