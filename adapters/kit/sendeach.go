package kit

import (
	"context"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// SendEach is a driver's SendBatch over a client that confirms one message
// per call (an MQTT PUBLISH, a STOMP SEND with a receipt): it calls send
// for every message, concurrently, and returns nil when every call
// returned nil, else a slice of len(msgs) whose element i is the error of
// msgs[i]. A single message is sent on the caller's goroutine.
func SendEach(ctx context.Context, msgs []ports.Message, send func(context.Context, *ports.Message) error) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 1 {
		errs[0] = send(ctx, &msgs[0])
	} else {
		var wg sync.WaitGroup
		for i := range msgs {
			wg.Go(func() { errs[i] = send(ctx, &msgs[i]) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}
