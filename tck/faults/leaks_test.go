package faults_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/tck/faults"
)

// blockedInSluice stands for a goroutine of sluice's own left behind.
func blockedInSluice(stop <-chan struct{}) { <-stop }

// A leak excuse tied to a broker's goroutines must not swallow one of
// sluice's: SplitLeaks hands every goroutine the predicate does not
// claim back as a leak, and TopFrame names the blocked code, not the
// runtime primitive it blocks in.
func TestSplitLeaksKeepsGoroutinesTheExcuseDoesNotClaim(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); blockedInSluice(stop) }()
	defer func() { close(stop); <-done }()
	err := goleak.Find(opts...)
	if err == nil {
		t.Fatal("goleak found no goroutine although one is blocked")
	}
	brokerOnly := func(stack string) bool {
		return strings.HasPrefix(faults.TopFrame(stack), "github.com/ThreeDotsLabs/watermill.")
	}
	stranded, others := faults.SplitLeaks(err, brokerOnly)
	if len(stranded) != 0 || len(others) != 1 || !strings.Contains(others[0], "blockedInSluice") {
		t.Fatalf("a sluice goroutine under an excuse for another module's goroutines: stranded %q, others %q", stranded, others)
	}
	if top := faults.TopFrame(others[0]); !strings.HasSuffix(top, "faults_test.blockedInSluice") {
		t.Fatalf("TopFrame = %q, want the blocked test function", top)
	}
	all := func(string) bool { return true }
	if stranded, others := faults.SplitLeaks(err, all); len(stranded) != 1 || len(others) != 0 {
		t.Fatalf("an excuse claiming everything: stranded %d, others %d", len(stranded), len(others))
	}
}
