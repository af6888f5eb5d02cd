package main

import (
	"strings"
	"testing"
)

func TestReportListsSkipsAndFailures(t *testing.T) {
	var b strings.Builder
	r := newReport(&b)
	for _, e := range []event{
		{Action: "output", Package: "p", Test: "TestA", Output: "=== RUN   TestA\n"},
		{Action: "output", Package: "p", Test: "TestA", Output: "    a_test.go:9: no broker: rabbitmq-server not installed\n"},
		{Action: "output", Package: "p", Test: "TestA", Output: "--- SKIP: TestA (0.00s)\n"},
		{Action: "skip", Package: "p", Test: "TestA"},
		{Action: "output", Package: "p", Test: "TestB", Output: "    b_test.go:3: lost 2 of 10\n"},
		{Action: "fail", Package: "p", Test: "TestB"},
		{Action: "pass", Package: "p", Test: "TestC"},
		{Action: "output", Package: "p", Test: "TestD", Output: "panic: test timed out\n"},
		{Action: "fail", Package: "p", Elapsed: 1.5},
	} {
		r.add(e)
	}
	r.summary()
	out := b.String()
	for _, want := range []string{
		"b_test.go:3: lost 2 of 10",
		"panic: test timed out",
		"FAIL\tp\t1.500s",
		"SKIPPED (1):\n  p TestA: a_test.go:9: no broker: rabbitmq-server not installed",
		"tests: 1 passed, 1 failed, 1 skipped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !r.failed {
		t.Error("a failed test did not make the report fail")
	}
}

func TestEmptyStreamFails(t *testing.T) {
	r := newReport(new(strings.Builder))
	if r.seen {
		t.Fatal("an empty stream counts as having results")
	}
}
