package kit

import "sync/atomic"

// Reports is a driver.Reporter to embed in a driver's subscription:
// SetReport keeps the portable layer's function and Report calls it.
// Safe for concurrent use.
type Reports struct{ f atomic.Pointer[func(error)] }

// SetReport implements driver.Reporter.
func (r *Reports) SetReport(report func(error)) { r.f.Store(&report) }

// Report sends err to the subscription's Errors channel; false before
// SetReport, when nothing took it (the caller logs it instead).
func (r *Reports) Report(err error) bool {
	f := r.f.Load()
	if f != nil {
		(*f)(err)
	}
	return f != nil
}
