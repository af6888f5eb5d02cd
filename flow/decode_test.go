package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

type basket struct {
	Name  string         `json:"name"`
	Items []int          `json:"items"`
	Tags  map[string]int `json:"tags"`
	Owner *string        `json:"owner"`
}

// Decode reuses what it decodes into: no field of one delivery may show up
// in the value of another (not after a payload that failed half-way
// either), and a value a handler keeps is never written to again. Run
// with -race: a reused target still shared with a kept value is a race.
func TestDecodeValuesAreIndependent(t *testing.T) {
	payloads := []string{
		`{"name":"a","items":[1,2,3],"tags":{"x":1},"owner":"ann"}`,
		`{}`,
		`{"items":[4,5],"name":7}`, // fails after items was filled: poison
		`{"name":"b"}`,
		`{"tags":{"y":2}}`,
		`{"owner":"bob","items":[]}`,
	}
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			var mu sync.Mutex
			kept := map[string]basket{}
			f, _ := start(t, spec, func(p *flow.Pipeline) {
				flow.Sink(flow.Decode[basket](p.Source(), flow.Workers(workers)), func(ctx context.Context, b basket) error {
					mu.Lock()
					kept[flow.DeliveryFrom(ctx).ID] = b
					mu.Unlock()
					return nil
				})
			})
			const rounds = 50
			want := map[string]basket{}
			poison := 0
			for range rounds {
				for _, pl := range payloads {
					d := delivery(pl, 0)
					var b basket
					if json.Unmarshal([]byte(pl), &b) != nil {
						poison++
					} else {
						want[d.ID] = b
					}
					f.push(d)
				}
			}
			s := f.waitSettled(t, rounds*len(payloads))
			dead := 0
			for _, x := range s {
				if x.disp.Action == ports.DeadLetter {
					dead++
				}
			}
			if dead != poison {
				t.Fatalf("%d dead-lettered, want %d", dead, poison)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(kept) != len(want) {
				t.Fatalf("handled %d, want %d", len(kept), len(want))
			}
			for id, w := range want {
				if got := kept[id]; !reflect.DeepEqual(got, w) {
					t.Fatalf("delivery %s decoded as %+v, want %+v", id, got, w)
				}
			}
		})
	}
}
