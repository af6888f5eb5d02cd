package activemq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// A receipt wait that go-stomp fails because the connection closed is a
// lost connection, whether wait saw the answer or the dead reader first:
// DeclareGroup retries on errLost and on nothing else.
func TestWaitReportsAClosedConnectionAsLost(t *testing.T) {
	// What go-stomp 3.1.3 hands a receipt wait when its reader ends
	// (sendError: an ERROR frame with only a message header).
	ended := stomp.Error{Message: "connection closed", Frame: frame.New(frame.ERROR, frame.Message, "connection closed")}
	// What a broker's refusal looks like: ActiveMQ adds content-type and
	// the exception text.
	refused := frame.New(frame.ERROR, frame.Message, "Invalid selector", frame.ContentType, "text/plain")
	refused.Body = []byte("javax.jms.InvalidSelectorException: ...")
	for _, tc := range []struct {
		name     string
		err      error
		deadToo  bool
		wantLost bool
	}{
		{"closed unexpectedly, reader still alive", stomp.ErrClosedUnexpectedly, false, true},
		{"closed unexpectedly, reader dead too", stomp.ErrClosedUnexpectedly, true, true},
		{"already closed", stomp.ErrAlreadyClosed, false, true},
		{"go-stomp's own ERROR frame, reader still alive", ended, false, true},
		{"go-stomp's own ERROR frame, reader dead too", ended, true, true},
		{"the broker's ERROR frame", stomp.Error{Message: "Invalid selector", Frame: refused}, false, false},
		{"an error without a frame", stomp.Error{Message: "invalid frame format"}, false, false},
		{"a receipt", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &stompConn{dead: make(chan struct{}), receiptTimeout: time.Minute}
			answered := make(chan struct{})
			if tc.deadToo {
				close(c.dead)
			}
			err := c.wait(context.Background(), func() error { defer close(answered); return tc.err }, nil, nil)
			<-answered
			if got := errors.Is(err, errLost); got != tc.wantLost {
				t.Fatalf("wait = %v: errors.Is(errLost) = %v, want %v", err, got, tc.wantLost)
			}
			// With the reader dead too, wait may take either answer.
			if tc.err != nil && !tc.deadToo && !errors.Is(err, tc.err) {
				t.Fatalf("wait = %v: lost go-stomp's own error %v", err, tc.err)
			}
			if tc.err == nil && err != nil {
				t.Fatalf("wait = %v, want nil", err)
			}
		})
	}
}
