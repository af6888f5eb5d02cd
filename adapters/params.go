package adapters

import (
	"fmt"
	"net/url"
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
