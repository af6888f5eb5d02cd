package activemq

import (
	"log/slog"

	"github.com/go-stomp/stomp/v3"
)

// StompLogger gives the tests' raw go-stomp clients the adapter's routing
// of go-stomp's log lines (which go-stomp prints with the standard log
// package otherwise).
func StompLogger(l *slog.Logger) func(*stomp.Conn) error {
	return stomp.ConnOpt.Logger(stompLogger{l})
}
