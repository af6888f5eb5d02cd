package kit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

type defaulted struct {
	Name     string        `default:"sluice"`
	Parts    int32         `default:"4"`
	Wait     time.Duration `default:"250ms"`
	Ratio    float64       `default:"0.5"`
	Untagged int
}

func TestDefaultTagsFillZeroAndNegative(t *testing.T) {
	var o defaulted
	o.Parts, o.Wait = -1, -time.Second
	kit.DefaultTags(&o)
	want := defaulted{Name: "sluice", Parts: 4, Wait: 250 * time.Millisecond, Ratio: 0.5}
	if o != want {
		t.Fatalf("DefaultTags = %+v, want %+v", o, want)
	}
}

func TestDefaultTagsKeepGivenValues(t *testing.T) {
	o := defaulted{Name: "ns", Parts: 8, Wait: time.Second, Ratio: 2, Untagged: -3}
	given := o
	kit.DefaultTags(&o)
	if o != given {
		t.Fatalf("DefaultTags changed given values: %+v, want %+v", o, given)
	}
}

func TestDefaultTagsPanicsOnABadTag(t *testing.T) {
	for name, opts := range map[string]any{
		"unparsable": &struct {
			N int `default:"four"`
		}{},
		"out of range": &struct {
			N int8 `default:"300"`
		}{},
		"unsupported kind": &struct {
			B bool `default:"true"`
		}{},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "kit.DefaultTags: field") {
					t.Fatalf("recovered %v, want a kit.DefaultTags panic", r)
				}
			}()
			kit.DefaultTags(opts)
		})
	}
}
