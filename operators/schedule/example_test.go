package schedule_test

import (
	"fmt"
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
)

// An adapter without native delay holds a delayed requeue locally and
// cancels what is pending when it stops: nothing is settled by the
// scheduler itself.
func ExampleScheduler() {
	s := schedule.New(schedule.Options{})
	done := make(chan string, 1)
	_, _ = s.After(10*time.Millisecond, func() { done <- "requeue m-1 now" }) // must not block: hand off
	later, _ := s.After(time.Hour, func() { fmt.Println("never runs") })

	fmt.Println(<-done)
	fmt.Println("cancelled:", later.Cancel())
	_, _ = s.After(time.Hour, func() {})
	fmt.Println("dropped at stop:", s.Stop())
	// Output:
	// requeue m-1 now
	// cancelled: true
	// dropped at stop: 1
}
