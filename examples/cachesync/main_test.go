package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/examples/internal/readme"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// adapters/all links the RocketMQ client, whose opencensus
		// dependency starts this worker at init, for the process's life.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// The example runs to completion on the embedded broker and prints what
// its README says.
func TestRunMatchesREADME(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), config{url: "mem://", timeout: 30 * time.Second}, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	readme.Check(t, out.String())
}
