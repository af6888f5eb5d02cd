package portable_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// TestCopyCountHeader: on a driver whose requeues are copies, the count
// header is added to RedeliveryCount and removed; a malformed one makes
// the delivery poison (a *ports.HeaderError).
func TestCopyCountHeader(t *testing.T) {
	ctx, b, a := newToy(t)
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, count := range []string{"2", "three"} {
		if err := b.publish(ports.Message{Topic: "t", Payload: []byte(count), Headers: ports.NewHeaders(ports.HeaderRedeliveryCount, count)}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := s.Receive(ctx, 2)
	for len(ds) < 2 && err == nil {
		var more []*ports.Delivery
		more, err = s.Receive(ctx, 2-len(ds))
		ds = append(ds, more...)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if _, ok := d.Headers.Lookup(ports.HeaderRedeliveryCount); ok {
			t.Errorf("%s: the count header stayed in the envelope", d.Payload)
		}
	}
	if ds[0].RedeliveryCount != 2 || ds[0].Err != nil {
		t.Errorf("count 2: RedeliveryCount %d, Err %v; want 2, nil", ds[0].RedeliveryCount, ds[0].Err)
	}
	var he *ports.HeaderError
	if !errors.As(ds[1].Err, &he) || !ports.IsPoison(ds[1].Err) {
		t.Errorf("count three: Err %v, want a poison *ports.HeaderError", ds[1].Err)
	}
}
