package kit_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// lazy is headers left in a broker's record.
type lazy ports.Headers

func (l lazy) Lookup(name string) (string, bool) { return ports.Headers(l).Lookup(name) }
func (l lazy) Load() ports.Headers               { return slices.Clone(ports.Headers(l)) }

// A record copied by its driver is the delivery the portable layer made of
// it: transport headers out (a requeue copy's count added, its group
// dropped so a dead letter of it is nobody's foreign copy), the due time
// returned, the record's own headers untouched.
func TestRecordDeliveryAsThePortableLayerSeesIt(t *testing.T) {
	due := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	h := ports.NewHeaders(ports.HeaderID, "m-1", ports.HeaderRedeliveryCount, "4", kit.HeaderRequeueGroup, "g", "tenant", "t-1",
		kit.HeaderNotBefore, strconv.FormatInt(due.UnixMilli(), 10))
	r := driver.Record{Message: ports.Message{Topic: "orders", Payload: []byte("{}"), Headers: h}, RedeliveryCount: 2, BrokerID: "0-7"}
	d, at := kit.RecordDelivery(&r)
	if d.ID != "m-1" || d.IDSource != ports.IDProducer || d.RedeliveryCount != 6 || !at.Equal(due) {
		t.Fatalf("delivery %s (%v) count %d due %v; want m-1 from the header, 6, %v", d.ID, d.IDSource, d.RedeliveryCount, at, due)
	}
	if want := ports.NewHeaders(ports.HeaderID, "m-1", "tenant", "t-1"); !slices.Equal(d.Headers, want) {
		t.Fatalf("headers %v, want %v", d.Headers, want)
	}
	if len(r.Message.Headers) != len(h) || r.Message.Headers.Get(kit.HeaderRequeueGroup) != "g" {
		t.Fatalf("the record's own headers changed: %v", r.Message.Headers)
	}

	foreign := driver.Record{Message: ports.Message{Topic: "orders"}, BrokerID: "0-8", Lazy: lazy(ports.NewHeaders("tenant", "t-2"))}
	d, at = kit.RecordDelivery(&foreign)
	if d.ID != "0-8" || d.IDSource != ports.IDBroker || !at.IsZero() || d.Headers.Get("tenant") != "t-2" {
		t.Fatalf("a foreign record with deferred headers: %s (%v) due %v headers %v; want the broker id, no due time, its headers", d.ID, d.IDSource, at, d.Headers)
	}
}

// A requeue copy is addressed to the group, or a broadcast instance's own;
// an anonymous broadcast's group ends with it.
func TestCopyGroup(t *testing.T) {
	for _, c := range []struct {
		spec ports.SubscriptionSpec
		want string
	}{
		{ports.SubscriptionSpec{Group: "g"}, "g"},
		{ports.SubscriptionSpec{Group: "g", Mode: ports.Broadcast, Instance: "i-1"}, "g#i-1"},
		{ports.SubscriptionSpec{Group: "g", Mode: ports.Broadcast}, ""},
	} {
		if got := kit.CopyGroup(c.spec); got != c.want {
			t.Errorf("CopyGroup(%+v) = %q, want %q", c.spec, got, c.want)
		}
	}
}
