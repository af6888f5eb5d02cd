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

func TestDefaultsFillZeroAndNegative(t *testing.T) {
	var o defaulted
	o.Parts, o.Wait = -1, -time.Second
	kit.Defaults(&o)
	want := defaulted{Name: "sluice", Parts: 4, Wait: 250 * time.Millisecond, Ratio: 0.5}
	if o != want {
		t.Fatalf("Defaults = %+v, want %+v", o, want)
	}
}

func TestDefaultsKeepGivenValues(t *testing.T) {
	o := defaulted{Name: "ns", Parts: 8, Wait: time.Second, Ratio: 2, Untagged: -3}
	given := o
	kit.Defaults(&o)
	if o != given {
		t.Fatalf("Defaults changed given values: %+v, want %+v", o, given)
	}
}

func TestDefaultsPanicsOnABadTag(t *testing.T) {
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
				if r := recover(); r == nil || !strings.Contains(r.(string), "kit.Defaults: field") {
					t.Fatalf("recovered %v, want a kit.Defaults panic", r)
				}
			}()
			kit.Defaults(opts)
		})
	}
}
