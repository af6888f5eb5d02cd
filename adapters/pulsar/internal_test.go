package pulsar

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/ports"
)

// nackRecorder is a consumer whose Nack asks the policy for the delay, as
// the client's negativeAcksTracker.AddMessage does.
type nackRecorder struct {
	pulsarclient.Consumer
	policy pulsarclient.NackBackoffPolicy
	mu     sync.Mutex
	got    map[string]time.Duration
}

func (r *nackRecorder) Nack(m pulsarclient.Message) {
	d := r.policy.Next(m.RedeliveryCount())
	r.mu.Lock()
	r.got[m.Properties()["n"]] = d
	r.mu.Unlock()
}

type propsMessage struct {
	pulsarclient.Message
	props map[string]string
}

func (m propsMessage) Properties() map[string]string { return m.props }
func (m propsMessage) RedeliveryCount() uint32       { return 0 }

func TestRequeueDelaysGiveEachConcurrentNackItsOwnDelay(t *testing.T) {
	r := newRequeueDelays(90 * time.Millisecond)
	if got := r.Next(1); got != 90*time.Millisecond {
		t.Fatalf("Next outside a nack = %v, want the tick", got)
	}
	rec := &nackRecorder{policy: r, got: map[string]time.Duration{}}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			m := propsMessage{props: map[string]string{"n": strconv.Itoa(i)}}
			r.nack(rec, m, time.Duration(i)*time.Millisecond)
		})
	}
	wg.Wait()
	for i := range 50 {
		// One millisecond more than asked: the client truncates its
		// deadline to the millisecond (see requeueDelays.nack).
		want := time.Duration(i)*time.Millisecond + time.Millisecond
		if got := rec.got[strconv.Itoa(i)]; got != want {
			t.Fatalf("nack %d got delay %v, want %v", i, got, want)
		}
	}
	if got := r.Next(1); got != 90*time.Millisecond {
		t.Fatalf("Next after the nacks = %v, want the tick", got)
	}
}

func TestClientErrorLogReachesSink(t *testing.T) {
	var got []error
	l := newErrorLogger(pulsarlog.DefaultNopLogger(), func(err error) { got = append(got, err) })
	cause := errors.New("connection reset")
	l.SubLogger(pulsarlog.Fields{"topic": "t"}).WithError(cause).WithField("consumer", 7).Error("reconnect failed")
	l.Warn("not an error")
	l.Errorf("lookup %s failed", "t")
	if len(got) != 2 {
		t.Fatalf("forwarded %d errors, want 2: %v", len(got), got)
	}
	var ce *ClientError
	if !errors.As(got[0], &ce) || !errors.Is(got[0], cause) || ce.Msg != "reconnect failed" || ce.Fields["topic"] != "t" || ce.Fields["consumer"] != 7 {
		t.Fatalf("first forwarded error = %#v", got[0])
	}
	if got[1].Error() != "pulsar client: lookup t failed" {
		t.Fatalf("second forwarded error = %q", got[1])
	}
}

func TestHoldbackReleasesInTimeOrder(t *testing.T) {
	var b holdback
	now := time.Now()
	b.push(now.Add(2*time.Second), &ports.Delivery{ID: "late"})
	b.push(now.Add(time.Second), &ports.Delivery{ID: "soon"})
	b.push(now.Add(-time.Second), &ports.Delivery{ID: "due"})
	out := b.popDue(now, nil, 10)
	if len(out) != 1 || out[0].ID != "due" || b.len() != 2 {
		t.Fatalf("due now = %v, held %d", out, b.len())
	}
	if b.wait(now) == nil {
		t.Fatal("no timer while deliveries are held")
	}
	out = b.popDue(now.Add(3*time.Second), nil, 1)
	if len(out) != 1 || out[0].ID != "soon" {
		t.Fatalf("max 1 at +3s = %v, want [soon]", out)
	}
}

func FuzzNotBefore(f *testing.F) {
	for _, s := range []string{"", "0", "1700000000000", "-5", "12x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		at, err := notBefore(map[string]string{NotBeforeProperty: s})
		if err != nil {
			if !ports.IsPoison(err) || !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("error %v is not a HeaderError", err)
			}
			return
		}
		if strconv.FormatInt(at.UnixMilli(), 10) != s && s != "" {
			// Leading zeros or a '+' sign parse; the value must still round-trip numerically.
			n, _ := strconv.ParseInt(s, 10, 64)
			if n != at.UnixMilli() {
				t.Fatalf("%q parsed to %v", s, at)
			}
		}
	})
}

func FuzzToProducerMessage(f *testing.F) {
	f.Add("1s", "k", "id")
	f.Add("-1s", "", "")
	f.Add("garbage", "k", "x")
	f.Fuzz(func(t *testing.T, delayFor, key, id string) {
		m := message.NewMessage(id, []byte("p"))
		m.Metadata.Set(delay.DelayedForKey, delayFor)
		m.Metadata.Set(KeyMetadata, key)
		now := time.Now()
		pm, err := toProducerMessage(m, now)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if pm.Key != key {
			t.Fatalf("key %q, want %q", pm.Key, key)
		}
		for _, reserved := range []string{KeyMetadata, delay.DelayedForKey, delay.DelayedUntilKey} {
			if _, ok := pm.Properties[reserved]; ok {
				t.Fatalf("reserved metadata %s sent as a property", reserved)
			}
		}
		if pm.DeliverAfter > 0 {
			at, err := notBefore(pm.Properties)
			if err != nil || at.Before(now.Add(pm.DeliverAfter).Truncate(time.Millisecond)) {
				t.Fatalf("not-before %v (%v) earlier than the delay %v", at, err, pm.DeliverAfter)
			}
		}
	})
}
