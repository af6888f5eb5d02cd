package kit

import (
	"errors"
	"testing"
)

func TestReportsReachTheFunctionSetLast(t *testing.T) {
	var r Reports
	if r.Report(errors.New("before SetReport")) {
		t.Fatal("Report before SetReport said it was taken")
	}
	var got []error
	r.SetReport(func(err error) { got = append(got, err) })
	want := errors.New("renewal failed")
	if !r.Report(want) {
		t.Fatal("Report after SetReport said it was not taken")
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("reported %v, want [%v]", got, want)
	}
}
