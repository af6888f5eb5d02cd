package kit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestDeclaredRecordsOnceAndRefusesADifferentRedeclaration(t *testing.T) {
	ctx := context.Background()
	var d kit.Declared
	var created atomic.Int32
	create := func(context.Context, ports.TopicSpec) error { created.Add(1); return nil }
	spec := ports.TopicSpec{Topic: "orders", Retention: time.Minute, Groups: []string{"b", "a"}, QoS: ports.BestEffort}
	if err := d.Declare(ctx, spec, create); err != nil {
		t.Fatal(err)
	}
	same := spec
	same.Groups = []string{"a", "b"} // groups compare as sets
	if err := d.Declare(ctx, same, create); err != nil {
		t.Fatalf("the same declaration again: %v", err)
	}
	if n := created.Load(); n != 1 {
		t.Fatalf("create ran %d times, want once", n)
	}
	other := spec
	other.Retention, other.NoDeadLetter = time.Hour, true
	err := d.Declare(ctx, other, create)
	var re *ports.RedeclareError
	if !errors.As(err, &re) || !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a different redeclaration returned %v, want a *ports.RedeclareError", err)
	}
	if len(re.Diffs) != 2 || !strings.Contains(re.Diffs[0], "Retention: existing 1m0s, declared 1h0m0s") || !strings.Contains(re.Diffs[1], "NoDeadLetter") {
		t.Fatalf("diffs %q, want Retention and NoDeadLetter", re.Diffs)
	}
	if got, _ := d.Lookup("orders"); got.Retention != time.Minute || got.NoDeadLetter {
		t.Fatalf("record changed by a refused redeclaration: %+v", got)
	}
	if r := d.Retention("orders"); r != time.Minute {
		t.Fatalf("Retention = %v, want 1m", r)
	}
	if r := d.Retention("unknown"); r != 0 {
		t.Fatalf("Retention of an undeclared topic = %v, want 0", r)
	}
	if q := d.QoS(&ports.Message{Topic: "orders"}); q != ports.BestEffort {
		t.Fatalf("QoS of a default message on a best-effort topic = %v", q)
	}
	if q := d.QoS(&ports.Message{Topic: "unknown"}); q != ports.AtLeastOnce {
		t.Fatalf("QoS on an undeclared topic = %v", q)
	}
	if ts := d.Topics(); len(ts) != 1 || ts[0].Topic != "orders" {
		t.Fatalf("Topics = %+v", ts)
	}
}

func TestDeclaredRecordsNothingWhenCreateFails(t *testing.T) {
	ctx := context.Background()
	var d kit.Declared
	boom := errors.New("broker said no")
	spec := ports.TopicSpec{Topic: "orders", MaxLength: 10}
	if err := d.Declare(ctx, spec, func(context.Context, ports.TopicSpec) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Declare = %v, want the create error", err)
	}
	if _, ok := d.Lookup("orders"); ok {
		t.Fatal("a failed creation was recorded")
	}
	other := spec
	other.MaxLength = 20 // not a redeclaration: nothing was recorded
	if err := d.Declare(ctx, other, nil); err != nil {
		t.Fatalf("declaring after a failed creation: %v", err)
	}
}

func TestDeclaredValidatesAndIsSafeForConcurrentUse(t *testing.T) {
	ctx := context.Background()
	var d kit.Declared
	if err := d.Declare(ctx, ports.TopicSpec{Topic: "bad topic"}, nil); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("invalid topic: %v", err)
	}
	if err := d.Declare(ctx, ports.TopicSpec{Topic: "t", QoS: ports.ExactlyOnce}, nil); !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("exactly-once: %v", err)
	}
	var created atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := ports.TopicSpec{Topic: "t", Retention: time.Second}
			if i%2 == 1 {
				spec.Retention = 2 * time.Second
			}
			errs <- d.Declare(ctx, spec, func(context.Context, ports.TopicSpec) error { created.Add(1); return nil })
			_ = d.Retention("t")
		}()
	}
	wg.Wait()
	close(errs)
	var ok, refused int
	for err := range errs {
		var re *ports.RedeclareError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &re):
			refused++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if created.Load() != 1 || ok != 8 || refused != 8 {
		t.Fatalf("created %d, accepted %d, refused %d; want 1, 8, 8", created.Load(), ok, refused)
	}
}

func TestUnsupportedNamesTheProperty(t *testing.T) {
	spec := ports.TopicSpec{Topic: "t", Retention: time.Second}
	if err := kit.Unsupported("x", ports.Capabilities{}, spec); !errors.Is(err, ports.ErrUnsupported) || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("Unsupported = %v", err)
	}
	if err := kit.Unsupported("x", ports.Capabilities{Retention: true}, spec); err != nil {
		t.Fatalf("Unsupported with the capability = %v", err)
	}
	spec = ports.TopicSpec{Topic: "t", MaxLength: 3}
	if err := kit.Unsupported("x", ports.Capabilities{Retention: true}, spec); !errors.Is(err, ports.ErrUnsupported) || !strings.Contains(err.Error(), "3 messages") {
		t.Fatalf("Unsupported = %v", err)
	}
}
