package adapters

import (
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// Sentinel errors of Open. Test with errors.Is.
var (
	// ErrUnknownScheme: no opener is registered for the URL's scheme. It
	// wraps ports.ErrInvalid.
	ErrUnknownScheme = fmt.Errorf("%w: unknown scheme", ports.ErrInvalid)
	// ErrAlreadyOpen: an adapter opened by the same Mux is still open
	// (one adapter is active at a time; see Mux).
	ErrAlreadyOpen = fmt.Errorf("an adapter is already open in this process")
)

// URLError is the error of Open: what went wrong with the adapter URL
// names. URL is shown without credentials or secret parameters.
type URLError struct {
	URL string
	Err error
}

func (e *URLError) Error() string {
	if e.URL == "" {
		return "adapters: open: " + e.Err.Error()
	}
	return fmt.Sprintf("adapters: open %s: %v", e.URL, e.Err)
}

// Unwrap returns the cause.
func (e *URLError) Unwrap() error { return e.Err }

// ParamError reports a bad query parameter or option: unknown, malformed,
// out of range, or given twice. It wraps ports.ErrInvalid.
type ParamError struct {
	// Param is the query parameter or option name.
	Param string
	// Reason says what is wrong and what is accepted. It never holds the
	// value of a secret parameter.
	Reason string
}

func (e *ParamError) Error() string { return fmt.Sprintf("parameter %s: %s", e.Param, e.Reason) }

// Is makes errors.Is(err, ports.ErrInvalid) true.
func (e *ParamError) Is(target error) bool { return target == ports.ErrInvalid }
