package adapters

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

type level int

type bindOptions struct {
	Name     string        `url:"name"`
	Kind     string        `url:"kind,fast|safe"`
	Level    level         `url:"level,none|some|all"`
	Replicas int           `url:"replicas,1..64"`
	Wait     time.Duration `url:"wait,1ms..1m"`
	Ratio    float64       `url:"ratio,0.001..1"`
	Raw      bool          `url:"raw"`
	Untagged int
}

func bindQuery(t *testing.T, query string, o *bindOptions, also ...string) error {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return newParams("test", q).Bind(o, also...)
}

func TestBindSetsTaggedFields(t *testing.T) {
	o := bindOptions{Replicas: 3, Untagged: 7}
	err := bindQuery(t, "name=a&kind=safe&level=all&wait=250ms&ratio=0.5&raw=true", &o)
	if err != nil {
		t.Fatal(err)
	}
	want := bindOptions{Name: "a", Kind: "safe", Level: 2, Replicas: 3, Wait: 250 * time.Millisecond, Ratio: 0.5, Raw: true, Untagged: 7}
	if o != want {
		t.Fatalf("bound %+v, want %+v (an absent parameter keeps its field)", o, want)
	}
}

func TestBindRefusesBadValuesNamingTheParameter(t *testing.T) {
	for query, reason := range map[string]string{
		"replicas=65":   "not an integer within 1..64",
		"wait=2m":       "not a duration within 1ms..1m0s",
		"ratio=0":       "not a number within 0.001..1",
		"kind=slow":     `"slow" is not fast or safe`,
		"level=most":    `"most" is not none, some or all`,
		"raw=maybe":     "not true or false",
		"name=a&name=b": "given more than once",
	} {
		var o bindOptions
		err := bindQuery(t, query, &o)
		var pe *ParamError
		if !errors.As(err, &pe) || !errors.Is(err, ports.ErrInvalid) || !strings.Contains(pe.Reason, reason) {
			t.Errorf("%s: got %v, want a ParamError saying %q", query, err, reason)
		}
	}
}

func TestBindNamesUnknownAndAcceptedParameters(t *testing.T) {
	var o bindOptions
	err := bindQuery(t, "colour=red&mechanism=plain", &o, "mechanism")
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Param != "colour, mechanism" {
		t.Fatalf("got %v, want the unconsumed parameters named", err)
	}
	for _, name := range []string{"replicas", "ratio", "mechanism"} {
		if !strings.Contains(pe.Reason, name) {
			t.Errorf("the error does not list the accepted %q: %s", name, pe.Reason)
		}
	}
}
