package tck

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(17, "BroadcastInstanceCollision_SecondInstanceRefusedOrReported", func(c ports.Capabilities) string {
		switch {
		case !c.Broadcast:
			return "declares no Broadcast capability"
		case c.InstanceGuard == ports.InstanceUnguarded:
			return "declares no instance guard (Capabilities.InstanceGuard): two running Broadcast subscriptions with one Instance are not noticed"
		}
		return ""
	}, caseInstanceCollision)
}

// 17. Two running Broadcast subscriptions with one Instance: the second is
// refused at Subscribe with an error naming SubscriptionSpec.Instance
// (InstanceRefused, InstanceRefusedInProcess), or, where the broker hands
// the instance over (InstanceDetected), one of the two reports
// ErrInstanceShared on its Errors channel. Either way nobody silently
// receives nothing: a refused attempt leaves the first one receiving, and
// once the first stops the Instance can be taken again.
func caseInstanceCollision(k *kit) {
	spec := ports.SubscriptionSpec{Topic: k.topic, Mode: ports.Broadcast, Group: k.group, Instance: "inst-" + randHex(3), InFlight: 4}
	other := k.adapter() // another process
	first := k.subscribe(k.first, spec)

	if k.caps.InstanceGuard == ports.InstanceDetected {
		second := k.subscribe(other, spec)
		k.reportedShared(spec.Instance, first, second)
		return
	}
	for _, c := range []struct {
		name string
		a    ports.Adapter
	}{{"another adapter", other}, {"the same adapter", k.first}} {
		s, err := c.a.Subscribe(k.ctx, spec)
		if err == nil {
			k.stopSub(s)
			k.t.Fatalf("a second Subscribe with Instance %q on %s succeeded while the first runs; want it refused with ErrInstanceShared (capability %s)", spec.Instance, c.name, k.caps.InstanceGuard)
		}
		if !errors.Is(err, ports.ErrInstanceShared) || !errors.Is(err, ports.ErrInvalid) ||
			!strings.Contains(err.Error(), "SubscriptionSpec.Instance") || !strings.Contains(err.Error(), spec.Instance) {
			k.t.Fatalf("second Subscribe with Instance %q on %s returned %v; want an error matching ErrInstanceShared and ErrInvalid that names SubscriptionSpec.Instance and %q", spec.Instance, c.name, err, spec.Instance)
		}
	}
	// The refused attempts did not disturb the first.
	id := k.sendUnrouted(other)
	k.receiveID(first, id, "the first subscription, after the refused attempts")
	k.stopSub(first)

	// Stopped, the Instance can be taken again.
	again := k.subscribe(other, spec)
	k.stopSub(again)
}

func (k *kit) subscribe(a ports.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	k.t.Helper()
	s, err := a.Subscribe(k.ctx, spec)
	if err != nil {
		k.t.Fatalf("Subscribe %s Instance %q: %v", spec.Topic, spec.Instance, err)
	}
	k.t.Cleanup(func() { k.stopSub(s) })
	return s
}

// stopSub stops s; stopping twice is allowed (ErrClosed).
func (k *kit) stopSub(s ports.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil && !errors.Is(err, ports.ErrClosed) {
		k.t.Errorf("stopping subscription: %v", err)
	}
}

// receiveID receives on s until the delivery with id arrives and acks it.
func (k *kit) receiveID(s ports.Subscription, id, what string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.ctx, k.opts.Timeout)
	defer cancel()
	for {
		ds, err := s.Receive(ctx, 1)
		if err != nil {
			k.t.Fatalf("waiting %v for message %s on %s: %v", k.opts.Timeout, id, what, err)
		}
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			k.t.Fatalf("acking on %s: %v", what, err)
		}
		for _, d := range ds {
			if d.ID == id {
				return
			}
		}
	}
}

// reportedShared waits until one of two subscriptions of one Instance
// reports ErrInstanceShared on its Errors channel.
func (k *kit) reportedShared(instance string, subs ...ports.Subscription) {
	k.t.Helper()
	deadline := time.After(k.opts.Timeout)
	check := func(which string, err error) bool {
		if !errors.Is(err, ports.ErrInstanceShared) {
			return false
		}
		if !strings.Contains(err.Error(), instance) {
			k.t.Fatalf("the %s subscription reported %v, which does not name instance %q", which, err, instance)
		}
		k.t.Logf("the %s subscription reported: %v", which, err)
		return true
	}
	first, second := subs[0].Errors(), subs[1].Errors()
	for {
		select {
		case err, ok := <-first:
			if !ok {
				first = nil // closed: nothing more will come
			} else if check("first", err) {
				return
			}
		case err, ok := <-second:
			if !ok {
				second = nil
			} else if check("second", err) {
				return
			}
		case <-deadline:
			k.t.Fatalf("neither of two running Broadcast subscriptions with Instance %q reported ErrInstanceShared within %v (capability %s)", instance, k.opts.Timeout, k.caps.InstanceGuard)
		}
	}
}
