package adapters

import (
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Params are a URL's query parameters, consumed one by one by an opener.
// Each getter removes its parameter and records a *ParamError for a
// malformed or out-of-range value (returning the default); Err then
// reports the first such error, or the parameters nobody consumed.
type Params struct {
	scheme  string
	q       url.Values
	given   map[string]bool
	errs    []error
	shared  int        // errors recorded while parsing the shared parameters
	secrets *secretSet // where Secret records what it reads (nil in bare Params)
}

func newParams(scheme string, q url.Values) *Params {
	given := make(map[string]bool, len(q))
	for k := range q {
		given[k] = true
	}
	return &Params{scheme: scheme, q: q, given: given}
}

// take removes name and returns its single value.
func (p *Params) take(name string) (string, bool) {
	vs, ok := p.q[name]
	if !ok {
		return "", false
	}
	delete(p.q, name)
	if len(vs) > 1 {
		p.fail(name, "given more than once")
	}
	return vs[0], true
}

func (p *Params) has(name string) bool { return p.given[name] }

func (p *Params) fail(name, reason string) {
	p.errs = append(p.errs, &ParamError{Param: name, Reason: reason})
}

// sharedErr reports errors in the shared parameters, before the opener
// runs.
func (p *Params) sharedErr() error {
	p.shared = len(p.errs)
	if len(p.errs) > 0 {
		return p.errs[0]
	}
	return nil
}

// String returns name's value, or def when absent.
func (p *Params) String(name, def string) string {
	if v, ok := p.take(name); ok {
		return v
	}
	return def
}

// Int returns name's value as an integer within lo..hi, or def when absent.
func (p *Params) Int(name string, def, lo, hi int) int {
	v, ok := p.take(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, fmt.Sprintf("%q is not an integer within %d..%d", v, lo, hi))
		return def
	}
	return n
}

// Duration returns name's value as a Go duration ("250ms", "5s") within
// lo..hi, or def when absent.
func (p *Params) Duration(name string, def, lo, hi time.Duration) time.Duration {
	v, ok := p.take(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		p.fail(name, fmt.Sprintf("%q is not a duration within %v..%v (e.g. 250ms, 5s)", v, lo, hi))
		return def
	}
	return d
}

// Float returns name's value as a number within lo..hi, or def when
// absent.
func (p *Params) Float(name string, def, lo, hi float64) float64 {
	v, ok := p.take(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < lo || f > hi {
		p.fail(name, fmt.Sprintf("%q is not a number within %g..%g", v, lo, hi))
		return def
	}
	return f
}

// Bool returns name's value as a boolean (true/false/1/0), or def when
// absent.
func (p *Params) Bool(name string, def bool) bool {
	v, ok := p.take(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, fmt.Sprintf("%q is not true or false", v))
		return def
	}
	return b
}

// Err returns the first malformed parameter, or else an error naming every
// parameter nobody consumed together with the ones the scheme knows, or
// nil. Openers call it after consuming their parameters; known lists what
// they accept, for the message.
func (p *Params) Err(known ...string) error {
	if len(p.errs) > p.shared {
		return p.errs[p.shared]
	}
	if len(p.q) == 0 {
		return nil
	}
	var unknown []string
	for k := range p.q {
		unknown = append(unknown, k)
	}
	sort.Strings(unknown)
	accepted := append(append([]string(nil), sharedParams...), known...)
	return &ParamError{
		Param: strings.Join(unknown, ", "),
		Reason: fmt.Sprintf("unknown for %s:// (accepted: %s; and where they apply %s, %s)", p.scheme,
			strings.Join(accepted, ", "), strings.Join(secretParams, ", "), strings.Join(tlsParams, ", ")),
	}
}

// Bind sets the fields of the struct opts points to from the parameters
// their `url` tags name, and returns Err with those names as the accepted
// ones. A tag is the parameter's name, then optionally a comma and either
// a range "lo..hi" (integers, floats and durations) or the accepted words
// "a|b|c" (a string field takes the word; an integer field, such as an
// enumeration, takes the word's index). An absent parameter leaves its
// field as it was, so the field's zero value still means "the default":
//
//	type Options struct {
//		Replicas  int           `url:"replicas,1..64"`
//		Timeout   time.Duration `url:"wait_timeout,1ms..1m"`
//		QueueType QueueType     `url:"queue_type,quorum|classic"`
//	}
//
// Openers consume the parameters they parse by hand first, and list them
// in also so that Err names them among the accepted ones.
func (p *Params) Bind(opts any, also ...string) error {
	v := reflect.ValueOf(opts).Elem()
	known := also
	for i := range v.NumField() {
		tag, ok := v.Type().Field(i).Tag.Lookup("url")
		if !ok {
			continue
		}
		name, spec, _ := strings.Cut(tag, ",")
		known = append(known, name)
		if _, given := p.q[name]; given {
			p.bind(v.Field(i), name, spec)
		}
	}
	return p.Err(known...)
}

// bind parses name into f according to spec (a range or words).
func (p *Params) bind(f reflect.Value, name, spec string) {
	if words := strings.Split(spec, "|"); len(words) > 1 {
		s := p.String(name, "")
		i := slices.Index(words, s)
		switch {
		case i < 0:
			last := len(words) - 1
			p.fail(name, fmt.Sprintf("%q is not %s or %s", s, strings.Join(words[:last], ", "), words[last]))
		case f.Kind() == reflect.String:
			f.SetString(s)
		default:
			f.SetInt(int64(i))
		}
		return
	}
	lo, hi, _ := strings.Cut(spec, "..")
	switch {
	case f.Type() == reflect.TypeFor[time.Duration]():
		f.SetInt(int64(p.Duration(name, time.Duration(f.Int()), bound(lo, 0, time.ParseDuration), bound(hi, math.MaxInt64, time.ParseDuration))))
	case f.CanInt(): // int, int16, int32, …: a bound beyond the type is the program's bug
		f.SetInt(int64(p.Int(name, int(f.Int()), bound(lo, 0, strconv.Atoi), bound(hi, math.MaxInt, strconv.Atoi))))
	case f.Kind() == reflect.Float64:
		f.SetFloat(p.Float(name, f.Float(), bound(lo, 0, parseFloat), bound(hi, math.MaxFloat64, parseFloat)))
	case f.Kind() == reflect.Bool:
		f.SetBool(p.Bool(name, f.Bool()))
	case f.Kind() == reflect.String:
		f.SetString(p.String(name, f.String()))
	default:
		panic(fmt.Sprintf("adapters: Params.Bind: field for %q has unsupported type %s", name, f.Type()))
	}
}

// bound parses a bound of a url tag, or returns def for an empty one. The
// bounds are the program's, not the user's: a malformed one is a bug,
// found by the first test that binds the struct.
func bound[T any](s string, def T, parse func(string) (T, error)) T {
	if s == "" {
		return def
	}
	v, err := parse(s)
	if err != nil {
		panic("adapters: Params.Bind: bad bound " + s)
	}
	return v
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
